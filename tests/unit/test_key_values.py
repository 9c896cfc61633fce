"""Key values as JSON (min/max keys in the catalog) and partition paths."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

from firn.model.values import (
    WHOLE_COLUMN_ROWS,
    column_to_json,
    key_at,
    key_from_json,
    keys_at,
    partition_path,
    partition_texts,
    to_arrow,
)
from tests.changesets import KEY_KINDS, KeyKind


@given(kind=st.sampled_from(KEY_KINDS), ns=st.lists(st.integers(0, 200), min_size=1))
def test_json_round_trips_exactly_and_orders_like_arrow(kind: KeyKind, ns: list[int]) -> None:
    column = pa.array([kind.value(n) for n in ns], kind.type)
    as_json = column_to_json(column)
    assert to_arrow(as_json, kind.type).equals(column)
    schema = pa.schema([pa.field("k", kind.type)])
    decoded = [key_from_json([v], schema) for v in as_json]
    arrow_order = pc.sort_indices(column).to_pylist()
    python_order = sorted(range(len(ns)), key=lambda i: decoded[i])
    assert [decoded[i] for i in python_order] == [decoded[i] for i in arrow_order]


@given(
    kinds=st.lists(st.sampled_from(KEY_KINDS), min_size=1, max_size=3),
    ns=st.lists(st.integers(0, 200), min_size=1, max_size=30),
    data=st.data(),
)
def test_keys_at_several_rows_equal_key_at_each(
    kinds: list[KeyKind], ns: list[int], data: st.DataObject
) -> None:
    table = pa.table(
        {f"k{j}": pa.array([k.value(n) for n in ns], k.type) for j, k in enumerate(kinds)}
    )
    names = table.column_names
    rows = data.draw(st.lists(st.integers(0, len(ns) - 1), max_size=20), label="rows")
    assert keys_at(table, names, rows) == [key_at(table, names, r) for r in rows]
    # Past WHOLE_COLUMN_ROWS the rows are converted one by one: the same keys.
    big = pa.concat_tables([table] * (WHOLE_COLUMN_ROWS // len(ns) + 1))
    assert big.num_rows > WHOLE_COLUMN_ROWS
    assert keys_at(big, names, rows) == [key_at(table, names, r) for r in rows]


def test_nanosecond_timestamps_stay_exact() -> None:
    column = pa.array([1_700_000_000_123_456_789], pa.timestamp("ns", "UTC"))
    assert column_to_json(column) == [1_700_000_000_123_456_789]
    assert to_arrow(column_to_json(column), column.type).equals(column)


def test_partition_paths_are_hive_style_and_escaped() -> None:
    table = pa.table(
        {
            "region": ["eu/west", "us"],
            "day": pa.array([19000, 19001], pa.date32()),
            "tag": pa.array([b"\x00\xff", b"a"], pa.binary()),
        }
    )
    texts = partition_texts(table)
    assert texts[0] == ["eu/west", "2022-01-08", "00ff"]
    path = partition_path(table.column_names, texts[0])
    assert path == "region=eu%2Fwest/day=2022-01-08/tag=00ff"
    assert partition_path([], []) == ""
    assert partition_texts(table.select([])) == [[], []]
