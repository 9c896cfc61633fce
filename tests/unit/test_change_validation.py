"""A change set is checked and normalised before anything is written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from firn.errors import ConfigError
from firn.table.changes import validate_changes
from firn.table.schema import TableSchema

TABLE = TableSchema.build(
    "orders",
    pa.schema(
        [
            pa.field("region", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("qty", pa.int32(), nullable=False),
            pa.field("note", pa.string()),
        ]
    ),
    ["region", "id"],
    ["region"],
)


def changes(**columns: list) -> pa.Table:
    base = {
        "region": ["eu", "eu"],
        "id": [1, 2],
        "qty": pa.array([5, None], pa.int32()),
        "note": ["a", None],
        "_op": ["U", "D"],
    }
    base.update(columns)
    return pa.table(base)


def test_valid_changes_are_cast_ordered_and_numbered() -> None:
    data = changes().select(["_op", "note", "qty", "id", "region"])  # any column order
    out = validate_changes(TABLE, data)
    assert out.column_names == ["region", "id", "qty", "note", "_op", "_ord"]
    assert out.schema.field("id").type == pa.int64()
    assert out.schema.field("qty").type == pa.int32()
    assert out.column("_ord").to_pylist() == [0, 1]
    assert out.column("_op").to_pylist() == ["U", "D"]


def test_delete_rows_need_only_key_columns() -> None:
    deletes = pa.table(
        {"region": ["eu"], "id": [3], "qty": pa.nulls(1), "note": pa.nulls(1), "_op": ["D"]}
    )
    assert validate_changes(TABLE, deletes).num_rows == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (changes(region=["eu", None]), "key column 'region' has nulls"),
        (changes(id=[1, None]), "key column 'id' has nulls"),
        (changes(_op=["U", "X"]), r"unknown '_op' values \['X'\]"),
        (changes(_op=["U", None]), "'_op' has nulls"),
        (changes(_op=[1, 2]), "'_op' must be a string"),
        (changes(qty=pa.array([None, 1], pa.int32())), "non-nullable but an upsert row has a null"),
        (changes(id=["one", "two"]), "column 'id' has type string"),
        (changes(id=[1.5, 2.0]), "column 'id' has type double"),
        (changes().drop_columns(["note"]), r"missing \['note'\]"),
        (changes().append_column("extra", pa.array([1, 2])), r"unexpected \['extra'\]"),
        (changes().drop_columns(["_op"]), r"missing \['_op'\]"),
    ],
)
def test_bad_change_sets_are_refused_with_the_reason(data: pa.Table, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_changes(TABLE, data)


def test_only_tables_are_accepted() -> None:
    with pytest.raises(ConfigError, match=r"must be a pyarrow\.Table"):
        validate_changes(TABLE, [{"id": 1}])  # type: ignore[arg-type]
