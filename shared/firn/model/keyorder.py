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


SHORT_KEY_BYTES = 16
"""Longest string or binary key ``short_bytes_order`` sorts itself (two 64-bit words)."""
_KEEP_BYTES = np.array([((1 << (8 * k)) - 1) << (64 - 8 * k) for k in range(9)], np.uint64)
"""Per count of bytes kept (0-8), the mask that keeps that many of a word's leading bytes."""


def short_bytes_order(column: pa.Array) -> npt.NDArray[np.int64] | None:
    """The order ``pc.array_sort_indices`` gives a string or binary column without
    nulls (bytes compared one by one, a prefix before what it begins), stable; None
    for any other column, or one with a value longer than ``SHORT_KEY_BYTES``.

    Arrow compares the strings one pair at a time: 290-350 ns a row for 1.25M keys of
    16 bytes. Here each value's bytes, zero-padded to 16, are read as two big-endian
    64-bit words, and numpy sorts the rows by the words and then the length (a value
    and its zero-padded extension tie on the words, and the shorter sorts first, as a
    prefix does): 175-215 ns a row, the words included."""
    kind = column.type
    wide = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    if not (wide or pa.types.is_string(kind) or pa.types.is_binary(kind)):
        return None
    n = len(column)
    if n == 0 or column.null_count:
        return None
    _, offset_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offset_buffer, np.int64 if wide else np.int32)
    bounds: npt.NDArray[np.int64] = offsets[column.offset : column.offset + n + 1].astype(np.int64)
    lengths = np.diff(bounds)
    if int(lengths.max()) > SHORT_KEY_BYTES:
        return None
    end = int(bounds[-1])
    data = np.frombuffer(data_buffer, np.uint8)[:end] if data_buffer is not None else None
    starts = bounds[:-1]
    # Each value's 16 bytes read straight from the data, but for values starting
    # within 16 bytes of its end, whose bytes come from a zero-padded copy of that end.
    cut = max(0, end - SHORT_KEY_BYTES)
    tail = np.zeros(end - cut + SHORT_KEY_BYTES, np.uint8)
    if data is not None:
        tail[: end - cut] = data[cut:end]
    windows = np.empty((n, SHORT_KEY_BYTES), np.uint8)
    far = starts + SHORT_KEY_BYTES <= end
    if data is not None and far.any():
        windows[far] = np.lib.stride_tricks.sliding_window_view(data, SHORT_KEY_BYTES)[starts[far]]
    near = ~far
    tail_windows = np.lib.stride_tricks.sliding_window_view(tail, SHORT_KEY_BYTES)
    windows[near] = tail_windows[starts[near] - cut]
    words = windows.view(">u8").astype(np.uint64)
    first = words[:, 0] & _KEEP_BYTES[np.clip(lengths, 0, 8)]
    second = words[:, 1] & _KEEP_BYTES[np.clip(lengths - 8, 0, 8)]
    order: npt.NDArray[np.int64] = np.lexsort((lengths, second, first)).astype(np.int64)
    return order
