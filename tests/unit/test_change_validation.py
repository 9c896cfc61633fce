"""A change set is checked and normalised before anything is written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from firn.errors import ConfigError
from firn.model.changes import validate_changes
from firn.model.schema import TableSchema

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


TYPED = TableSchema.build(
    "typed",
    pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("code", pa.string(), nullable=False),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("small", pa.int32()),
            pa.field("price", pa.decimal128(12, 2)),
            pa.field("ratio", pa.float64()),
            pa.field("day", pa.date64()),
            pa.field("raw", pa.binary()),
        ]
    ),
    ["id", "code"],
)


def typed_changes(**columns: pa.Array) -> pa.Table:
    row = {f.name: pa.nulls(1, f.type) for f in TYPED.schema}
    row["id"] = pa.array([1], pa.int64())
    row["code"] = pa.array(["a"], pa.string())
    row.update(columns)
    return pa.table({**row, "_op": pa.array(["U"])})


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("at", pa.array([1_700_000_000_000_000], pa.int64())),  # int64 is not a timestamp
        ("at", pa.array([0], pa.timestamp("us"))),  # no zone is not UTC
        ("at", pa.array([0], pa.timestamp("ns", tz="UTC"))),  # coarser loses digits
        ("code", pa.array([7], pa.int64())),  # int64 is not a string
        ("code", pa.array([b"a"], pa.binary())),  # bytes are not text
        ("small", pa.array([7], pa.int64())),  # narrowing, even though 7 fits
        ("id", pa.array([7], pa.uint64())),  # uint64 does not fit int64
        ("id", pa.array([7.0], pa.float64())),
        ("ratio", pa.array([1], pa.int64())),  # int64 to float64 can lose digits
        ("price", pa.array([1], pa.decimal128(12, 3))),  # a finer scale
        ("price", pa.array([1], pa.decimal128(13, 2))),  # one more integer digit
        ("day", pa.array([0], pa.timestamp("ms"))),
        ("raw", pa.array(["x"], pa.string())),
    ],
)
def test_types_are_checked_strictly(column: str, values: pa.Array) -> None:
    with pytest.raises(ConfigError, match=f"column {column!r} has type") as refused:
        validate_changes(TYPED, typed_changes(**{column: values}))
    assert refused.value.retryable is False


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("id", pa.array([7], pa.int8())),
        ("id", pa.array([7], pa.uint32())),
        ("small", pa.array([7], pa.int16())),
        ("small", pa.array([7], pa.uint16())),
        ("ratio", pa.array([0.5], pa.float32())),
        ("code", pa.array(["a"], pa.large_string())),
        ("code", pa.array(["a"], pa.string_view())),
        ("code", pa.array(["a"]).dictionary_encode()),
        ("raw", pa.array([b"x"], pa.large_binary())),
        ("price", pa.array([1], pa.decimal128(10, 2))),
        ("price", pa.array([1], pa.decimal128(5, 1))),
        ("at", pa.array([1], pa.timestamp("s", tz="UTC"))),
        ("day", pa.array([1], pa.date32())),
        ("small", pa.nulls(1)),
    ],
)
def test_lossless_widenings_are_implicit(column: str, values: pa.Array) -> None:
    out = validate_changes(TYPED, typed_changes(**{column: values}))
    field = TYPED.schema.field(column)
    assert out.schema.field(column).type == field.type
    assert out.column(column).to_pylist() == values.cast(field.type).to_pylist()


def test_a_widening_that_overflows_the_finer_unit_is_refused() -> None:
    year_3000 = pa.array([32_503_680_000], pa.timestamp("s", tz="UTC"))
    table = TableSchema.build(
        "ns",
        pa.schema(
            [pa.field("id", pa.int64(), nullable=False), pa.field("at", pa.timestamp("ns", "UTC"))]
        ),
        ["id"],
    )
    data = pa.table({"id": [1], "at": year_3000, "_op": ["U"]})
    with pytest.raises(ConfigError, match="does not convert safely"):
        validate_changes(table, data)


def test_a_string_key_with_nul_is_refused_but_other_columns_may_hold_it() -> None:
    with pytest.raises(ConfigError, match="key column 'code' has a value with a NUL") as refused:
        validate_changes(TYPED, typed_changes(code=pa.array(["a\x00b"])))
    assert refused.value.retryable is False
    # Only keys go to the catalog: a NUL elsewhere, or a zero byte in binary, is data.
    assert validate_changes(TABLE, changes(note=["a\x00b", None])).num_rows == 2
    binary_key = TableSchema.build(
        "bin", pa.schema([pa.field("k", pa.binary(), nullable=False)]), ["k"]
    )
    assert validate_changes(binary_key, pa.table({"k": [b"\x00"], "_op": ["U"]})).num_rows == 1


PARTS = TableSchema.build(
    "parts",
    pa.schema(
        [
            pa.field("a", pa.string(), nullable=False),
            pa.field("b", pa.string(), nullable=False),
            pa.field("c", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
        ]
    ),
    ["a", "b", "c", "id"],
    ["a", "b", "c"],
)
APPEND_ONLY = TableSchema.build(
    "log", pa.schema([pa.field("p", pa.string()), pa.field("v", pa.int64())]), [], ["p"]
)


def parts(a: str, b: str = "x", c: str = "y") -> pa.Table:
    return pa.table({"a": ["ok", a], "b": [b, b], "c": [c, c], "id": [1, 2], "_op": ["U", "U"]})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (parts("x" * 201), "value of 201 bytes; at most 200 bytes"),
        (parts("é" * 101), "value of 202 bytes; at most 200 bytes"),
        (parts("é" * 90), "path component is 542 bytes once percent-escaped"),
        (parts("/" * 90), "path component is 272 bytes once percent-escaped"),
        (parts("a" * 170, "b" * 170, "c" * 170), "partition path"),
    ],
)
def test_partition_values_that_cannot_be_a_path_are_refused(data: pa.Table, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        validate_changes(PARTS, data)
    assert refused.value.retryable is False


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pa.table({"p": ["a", None], "v": [1, 2], "_op": ["U", "U"]}), "'p' has a null value"),
        (pa.table({"p": ["a\x00"], "v": [1], "_op": ["U"]}), "'p' has a value with a NUL"),
    ],
)
def test_unkeyed_partition_values_are_checked_too(data: pa.Table, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_changes(APPEND_ONLY, data)


def test_partition_values_up_to_the_limits_are_accepted() -> None:
    for value in ("x" * 200, "a/b", "..", "", "%2F", "é" * 42):
        assert validate_changes(PARTS, parts(value)).num_rows == 2
