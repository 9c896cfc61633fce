"""Comparing key columns with one key, vectorised, in the order Arrow sorts keys.

Rows sorted by ``pc.sort_indices`` on the key columns (ascending) are in
lexicographic order of the key tuple; these masks compare every row's key with one
bound in that same order, so a sorted table splits at a bound by counting the mask.
Key columns are never null, so no null rule is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from firn.model.values import to_arrow


def bound_scalars(key: Sequence[Any], key_schema: pa.Schema) -> list[pa.Scalar]:
    """A key in its catalog JSON form as one Arrow scalar per key column."""
    return [to_arrow([v], f.type)[0] for v, f in zip(key, key_schema, strict=True)]


def row_scalars(rows: pa.Table, key_columns: Sequence[str], row: int) -> list[pa.Scalar]:
    """The key of one row as one Arrow scalar per key column."""
    return [rows.column(c)[row] for c in key_columns]


def compare_mask(
    rows: pa.Table, key_columns: Sequence[str], bound: Sequence[pa.Scalar], *, strict: bool
) -> pa.ChunkedArray:
    """Per row: key < bound (``strict``) or key <= bound, lexicographically."""
    columns = [rows.column(c) for c in key_columns]
    last, last_bound = columns[-1], bound[-1]
    mask = pc.less(last, last_bound) if strict else pc.less_equal(last, last_bound)
    for column, value in zip(reversed(columns[:-1]), reversed(bound[:-1]), strict=True):
        mask = pc.or_(pc.less(column, value), pc.and_(pc.equal(column, value), mask))
    return mask


def in_range(
    rows: pa.Table,
    key_columns: Sequence[str],
    lower: Sequence[pa.Scalar] | None,
    upper: Sequence[pa.Scalar] | None,
) -> pa.ChunkedArray | None:
    """Rows with lower <= key < upper; ``None`` when both bounds are open."""
    mask = None
    if upper is not None:
        mask = compare_mask(rows, key_columns, upper, strict=True)
    if lower is not None:
        at_least = pc.invert(compare_mask(rows, key_columns, lower, strict=True))
        mask = at_least if mask is None else pc.and_(mask, at_least)
    return mask


def count_at_most(rows: pa.Table, key_columns: Sequence[str], bound: Sequence[pa.Scalar]) -> int:
    """How many leading rows of key-sorted ``rows`` have key <= bound."""
    if rows.num_rows == 0:
        return 0
    return int(pc.sum(compare_mask(rows, key_columns, bound, strict=False)).as_py() or 0)


def count_below(rows: pa.Table, key_columns: Sequence[str], bound: Sequence[pa.Scalar]) -> int:
    """How many leading rows of key-sorted ``rows`` have key < bound."""
    if rows.num_rows == 0:
        return 0
    return int(pc.sum(compare_mask(rows, key_columns, bound, strict=True)).as_py() or 0)


def position_bits(rows: int, low: int, high: int) -> int | None:
    """Low bits that hold a position among ``rows`` beside keys from ``low`` to
    ``high`` packed as ``(key - low) << bits | position`` in 64 bits; None when the
    keys' span leaves no room."""
    bits = max(1, (rows - 1).bit_length())
    return bits if high - low < 1 << (64 - bits) else None


def integer_order(values: npt.NDArray[np.signedinteger[Any]]) -> npt.NDArray[np.int64]:
    """The positions of ``values`` in ascending order (ties in any order), as
    ``np.argsort`` gives them, but about 2.5x faster when the values' span leaves
    room beside it for a row number in 64 bits (dense ids of up to ~2^40 apart for
    5M rows): each value is packed with its position into one unsigned integer and
    the packed integers sorted, which numpy does with its vectorised sort, where
    ``argsort`` compares values through their positions."""
    values = values.astype(np.int64, copy=False)
    n = len(values)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    low = int(values.min())
    bits = position_bits(n, low, int(values.max()))
    if bits is None:
        return np.argsort(values).astype(np.int64, copy=False)
    packed = (values - low).astype(np.uint64) << np.uint64(bits)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    return (packed & np.uint64((1 << bits) - 1)).astype(np.int64)
