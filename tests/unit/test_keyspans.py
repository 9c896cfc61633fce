"""Key spans of change files (``firn.model.keyspans``)."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from firn.model.keyspans import MAX_SPANS, key_spans


def spans_of(keys: list[int]) -> list[list[Any]] | None:
    return key_spans(pa.table({"k": sorted(keys)}), ["k"])


def test_an_event_logs_commit_is_its_late_keys_and_one_block_of_new_ones() -> None:
    keys = [17, 40_000, 91_250, *range(500_000, 500_250)]
    assert spans_of(keys) == [
        [[17], [17], 1],
        [[40_000], [40_000], 1],
        [[91_250], [91_250], 1],
        [[500_000], [500_249], 250],
    ]


def test_keys_without_a_wide_gap_or_measurable_gaps_record_no_spans() -> None:
    assert spans_of(list(range(0, 1000, 3))) is None, "a dense block is its range"
    assert spans_of([5]) is None
    strings = pa.table({"s": ["a", "b", "zzz"]})
    assert key_spans(strings, ["s"]) is None, "gaps between strings are not measured"


def test_dates_and_composite_keys_split_on_the_first_column() -> None:
    days = [dt.date(2024, 1, 1) + dt.timedelta(days=d) for d in (0, 0, 1, 2, 3, 900)]
    rows = pa.table({"day": pa.array(days, pa.date32()), "id": [1, 2, 1, 1, 1, 1]})
    spans = key_spans(rows, ["day", "id"])
    assert spans is not None
    assert [s[2] for s in spans] == [5, 1]
    assert spans[0][0] == [19723, 1]
    assert spans[-1][1] == [20623, 1]


def test_a_partition_column_leading_the_key_is_skipped() -> None:
    # The demo's key is (day, order_id); a change file holds one day.
    ids = [7, *range(9000, 9100)]
    rows = pa.table({"day": ["2024-06-01"] * len(ids), "order_id": ids})
    assert key_spans(rows, ["day", "order_id"]) == [
        [["2024-06-01", 7], ["2024-06-01", 7], 1],
        [["2024-06-01", 9000], ["2024-06-01", 9099], 100],
    ]
    varying = pa.table({"name": ["a", "b"] * 3, "id": [1, 2, 3, 4, 5, 6]}).sort_by("name")
    assert key_spans(varying, ["name", "id"]) is None, "the first varying column is a string"


@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=300))
@settings(max_examples=200, deadline=None)
def test_spans_are_disjoint_in_order_and_cover_every_key(keys: list[int]) -> None:
    keys = sorted(keys)
    spans = spans_of(keys)
    if spans is None:
        return
    assert 2 <= len(spans) <= MAX_SPANS
    bounds = [(lo[0], hi[0]) for lo, hi, _ in spans]
    assert sum(rows for _, _, rows in spans) == len(keys)
    assert bounds[0][0] == keys[0]
    assert bounds[-1][1] == keys[-1]
    assert all(lo <= hi for lo, hi in bounds)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(bounds))
    assert all(any(lo <= k <= hi for lo, hi in bounds) for k in keys)
