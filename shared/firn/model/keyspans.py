"""Where a change file's keys lie, finer than its key range: a few disjoint spans.

A fold rewrites (or reads for a deletion vector) every base file whose key range its
changes meet, and a file's ``[min_key, max_key]`` says little when its keys cluster:
an event log's commit holds a block of new ids past the whole base plus a few late
updates of old ones, so its range spans every base file though it touches a handful.
Each change file therefore records up to ``MAX_SPANS`` spans, ``[first, last, rows]``:
the first and last keys of a run of its sorted keys and how many rows it holds, split
at the largest gaps between neighbouring keys. The planner tests base files against
the spans instead of the range (``firn.engine.policies.folding``), and bounds the
rows a fold may hide in a base file by the rows of the spans that meet it
(``firn.engine.policies.tiered_runs``).
Gaps are measured on the first key column that varies in the file (a partition column
leading the key does not) when it is an integer, date or timestamp (ids and event
times, where clustering is usual); other keys record no spans and the range stands.

Pure: pyarrow only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firn.model.values import keys_at

MAX_SPANS = 8
"""Spans a file records at most: eight pairs of keys is a few hundred bytes of catalog
a file, and isolates seven stray keys (late updates) from one dense block."""


GAP_FACTOR = 8.0
"""A gap splits spans when it is wider than this many times the file's median gap:
wider than chance makes it among keys spread evenly (the widest of a few hundred
exponential gaps is about eight medians), so a dense block stays one span."""


def key_spans(
    rows: pa.Table, key_columns: Sequence[str], limit: int = MAX_SPANS
) -> list[list[Any]] | None:
    """Up to ``limit`` disjoint ``[first, last, rows]`` spans (keys in catalog JSON)
    covering ``rows``, which are sorted by ``key_columns``; ``None`` when they would
    say no more than the file's range (one span, or keys gaps cannot be measured on)."""
    n = rows.num_rows
    if n < 2 or limit < 2:
        return None
    numbers = _leading_numbers(rows, key_columns)
    if numbers is None:
        return None
    gaps = np.diff(numbers)
    # One stable sort gives both the median gap and the widest ones (np.median sorts
    # again, and its overhead was most of a small file's spans).
    order = np.argsort(gaps, kind="stable")
    wide = max(_median(gaps[order]), 1.0) * GAP_FACTOR
    widest = order[::-1][: limit - 1]
    cuts = sorted(int(i) + 1 for i in widest if gaps[i] > wide)
    if not cuts:
        return None
    starts = [0, *cuts]
    ends = [*(c - 1 for c in cuts), n - 1]
    keys = keys_at(rows, key_columns, [*starts, *ends])
    spans = len(starts)
    return [[keys[j], keys[spans + j], ends[j] + 1 - starts[j]] for j in range(spans)]


def _median(ascending: np.ndarray) -> float:
    """The median of sorted values, as ``np.median`` computes it (the mean of the two
    middle values when there is an even number)."""
    middle = len(ascending) // 2
    if len(ascending) % 2:
        return float(ascending[middle])
    return (float(ascending[middle - 1]) + float(ascending[middle])) / 2


def _leading_numbers(rows: pa.Table, key_columns: Sequence[str]) -> np.ndarray | None:
    """The first key column that is not constant in ``rows`` (a partition column
    leading the key is constant in a change file), as numbers; ``None`` when it is
    not a type gaps are measured on, or every key column is constant.

    The rows are sorted by the key, and a column is only looked at when those before
    it are constant, so it is sorted too: constant when its first and last values
    are equal (counting distinct values was most of a small commit file's spans)."""
    last = rows.num_rows - 1
    for name in key_columns:
        column = rows.column(name)
        if column[0] == column[last]:
            continue
        return _as_numbers(column.type, column)
    return None


def _as_numbers(type_: pa.DataType, column: pa.ChunkedArray) -> np.ndarray | None:
    """The column as float64 for measuring gaps, or ``None`` for other types (float
    keeps very large ids' gaps approximately, which is all a gap is for)."""
    if pa.types.is_integer(type_):
        values = column
    elif pa.types.is_date32(type_):
        values = pc.cast(column, pa.int32())
    elif pa.types.is_date64(type_) or pa.types.is_timestamp(type_):
        values = pc.cast(column, pa.int64())
    else:
        return None
    numbers: np.ndarray = np.asarray(values.to_numpy(), dtype=np.float64)
    return numbers
