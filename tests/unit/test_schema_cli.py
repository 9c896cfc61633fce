"""``firn schema`` and ``firn alter`` without a database: the type and default
parsers, the operations' order on the command line, their errors, and what they do
to a table definition (the model's ``SchemaChange``, as ``--dry-run`` uses it)."""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from datetime import UTC
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from firn.catalog.history import describe_columns
from firn.cli import build_parser, main
from firn.commands.schema import (
    TYPE_NAMES,
    apply_operations,
    parse_default,
    parse_operations,
    parse_type,
)
from firn.errors import ConfigError
from firn.model.evolution import SchemaChange
from firn.model.schema import TableSchema, default_json, field_id

# --- types


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("int8", pa.int8()),
        ("int16", pa.int16()),
        ("int32", pa.int32()),
        ("int64", pa.int64()),
        ("uint8", pa.uint8()),
        ("uint64", pa.uint64()),
        ("float32", pa.float32()),
        ("float64", pa.float64()),
        ("double", pa.float64()),
        ("bool", pa.bool_()),
        ("string", pa.string()),
        ("large_string", pa.large_string()),
        ("binary", pa.binary()),
        ("large_binary", pa.large_binary()),
        ("date32", pa.date32()),
        ("date64", pa.date64()),
        (" INT64 ", pa.int64()),
        ("timestamp[us]", pa.timestamp("us")),
        ("timestamp[s]", pa.timestamp("s")),
        ("timestamp[ns, tz=UTC]", pa.timestamp("ns", tz="UTC")),
        ("timestamp[ms, tz=Europe/Paris]", pa.timestamp("ms", tz="Europe/Paris")),
        ("timestamp[us,tz=+05:30]", pa.timestamp("us", tz="+05:30")),
        ("timestamp[us, UTC]", pa.timestamp("us", tz="UTC")),
        ("decimal(12,2)", pa.decimal128(12, 2)),
        ("decimal( 38 , 0 )", pa.decimal128(38, 0)),
        ("decimal128(10, 3)", pa.decimal128(10, 3)),
    ],
)
def test_a_type_from_its_text(text: str, expected: pa.DataType) -> None:
    assert parse_type(text).equals(expected)


@pytest.mark.parametrize(
    "type_",
    [
        *TYPE_NAMES.values(),
        pa.timestamp("us"),
        pa.timestamp("ns", tz="UTC"),
        pa.timestamp("s", tz="+05:30"),
        pa.decimal128(12, 2),
    ],
)
def test_every_type_as_firn_schema_prints_it_is_read_back(type_: pa.DataType) -> None:
    assert parse_type(str(type_)).equals(type_)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("text", "unknown column type 'text'"),
        ("", "unknown column type ''"),
        ("int65", "unknown column type"),
        ("null", "unknown column type"),
        ("list<int64>", "unknown column type"),
        ("decimal(0,0)", "precision must be from 1 to 38"),
        ("decimal(39,2)", "precision must be from 1 to 38"),
        ("decimal(5,6)", "scale must be from 0 to the precision (5)"),
        ("decimal(5,-1)", "scale must be from 0"),
        ("decimal(5)", "bad decimal type 'decimal(5)'"),
        ("timestamp", "bad timestamp type"),
        ("timestamp[days]", "timestamp unit must be one of s, ms, us, ns"),
        ("timestamp[us, tz=]", "empty time zone"),
        ("timestamp[us, tz=Mars/Olympus]", "unknown time zone 'Mars/Olympus'"),
        ("timestamp[us, tz=+25:00]", "unknown time zone"),
    ],
)
def test_a_bad_type_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_type(text)
    assert message in str(raised.value)


# --- defaults


@pytest.mark.parametrize(
    ("text", "type_", "expected"),
    [
        ("42", pa.int64(), 42),
        ("-7", pa.int8(), -7),
        (" +3 ", pa.uint16(), 3),
        ("1.5", pa.float64(), 1.5),
        ("-2e3", pa.float32(), -2000.0),
        ("7", pa.float64(), 7.0),
        ("true", pa.bool_(), True),
        ("False", pa.bool_(), False),
        ("hello world", pa.string(), "hello world"),
        ("", pa.string(), ""),
        (" padded ", pa.large_string(), " padded "),
        ("a=b:c", pa.string(), "a=b:c"),
        ("00ff", pa.binary(), b"\x00\xff"),
        ("", pa.large_binary(), b""),
        ("2024-02-29", pa.date32(), dt.date(2024, 2, 29)),
        ("2024-02-29", pa.date64(), dt.date(2024, 2, 29)),
        ("0.10", pa.decimal128(12, 2), Decimal("0.10")),
        ("-5", pa.decimal128(12, 2), Decimal("-5")),
        ("2024-01-01T12:30:00", pa.timestamp("us"), dt.datetime(2024, 1, 1, 12, 30)),
        ("2024-01-01 12:30:00.25", pa.timestamp("us"), dt.datetime(2024, 1, 1, 12, 30, 0, 250000)),
        ("2024-01-01T12:30:00.123", pa.timestamp("ms"), dt.datetime(2024, 1, 1, 12, 30, 0, 123000)),
        ("2024-01-01T12Z", pa.timestamp("us", tz="UTC"), dt.datetime(2024, 1, 1, 12, tzinfo=UTC)),
        (
            "2024-01-01T12:00:00+02:00",
            pa.timestamp("us", tz="UTC"),
            dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC),
        ),
    ],
)  # fmt: skip
def test_a_default_from_its_text(text: str, type_: pa.DataType, expected: Any) -> None:
    value = parse_default(text, type_)
    assert value == expected
    assert type(value) is type(expected)


def test_a_time_without_offset_is_in_the_columns_zone() -> None:
    paris = parse_default("2024-07-01T12:00:00", pa.timestamp("us", tz="Europe/Paris"))
    assert paris == dt.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    assert paris.astimezone(dt.UTC).hour == 10
    fixed = parse_default("2024-07-01T12:00:00", pa.timestamp("s", tz="-03:30"))
    assert fixed.utcoffset() == -dt.timedelta(hours=3, minutes=30)


@pytest.mark.parametrize(
    ("text", "type_", "message"),
    [
        ("1.5", pa.int64(), "'1.5' is not an integer"),
        ("", pa.int32(), "empty default"),
        ("ten", pa.float64(), "'ten' is not a number"),
        ("nan", pa.float64(), "finite"),
        ("inf", pa.float32(), "finite"),
        ("yes", pa.bool_(), "must be true or false"),
        ("1", pa.bool_(), "must be true or false"),
        ("1,5", pa.decimal128(5, 2), "not a decimal number"),
        ("NaN", pa.decimal128(5, 2), "finite decimal"),
        ("xyz", pa.binary(), "hex digits"),
        ("abc", pa.binary(), "hex digits"),
        ("2024-13-01", pa.date32(), "not an ISO date"),
        ("2024-01-01T00:00", pa.date32(), "not an ISO date"),
        ("yesterday", pa.timestamp("us"), "not an ISO date and time"),
        ("2024-01-01T00:00:00+01:00", pa.timestamp("us"), "the column has no time zone"),
        ("2024-01-01T00:00:00.5", pa.timestamp("s"), "finer than the column's unit (s)"),
        ("2024-01-01T00:00:00.0005", pa.timestamp("ms"), "finer than the column's unit (ms)"),
    ],
)
def test_a_bad_default_says_what_is_wrong(text: str, type_: pa.DataType, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_default(text, type_)
    assert message in str(raised.value)


# --- operations on the command line


def test_operations_keep_the_order_given() -> None:
    args = build_parser().parse_args(
        [
            "alter", "t",
            "--rename", "a:b",
            "--add", "c:int64=0",
            "--drop", "d",
            "--add", "e:timestamp[us, tz=UTC]=2024-01-01T00:00:00",
            "--doc", "c:the c: column",
            "--widen", "f:int64",
            "--optional", "g",
            "--first", "c",
            "--after", "e:c",
            "--before", "b:e",
            "--add-required", "h:bool=true",
            "--dry-run",
        ]
    )  # fmt: skip
    assert args.operations == [
        ("--rename", "a:b"),
        ("--add", "c:int64=0"),
        ("--drop", "d"),
        ("--add", "e:timestamp[us, tz=UTC]=2024-01-01T00:00:00"),
        ("--doc", "c:the c: column"),
        ("--widen", "f:int64"),
        ("--optional", "g"),
        ("--first", "c"),
        ("--after", "e:c"),
        ("--before", "b:e"),
        ("--add-required", "h:bool=true"),
    ]
    assert args.dry_run is True
    assert [str(op) for op in parse_operations(args.operations)] == [
        f"{option} {text}" for option, text in args.operations
    ]


def test_the_schema_commands_accept_json() -> None:
    parser = build_parser()
    for argv in (["schema", "t"], ["alter", "t", "--drop", "x"]):
        assert parser.parse_args([*argv, "--json"]).json is True
        assert parser.parse_args(argv).json is False
    assert parser.parse_args(["alter", "t"]).operations is None


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        (("--add", "x"), "--add x: expected NAME:TYPE[=DEFAULT]"),
        (("--add", ":int64"), "expected NAME:TYPE[=DEFAULT]"),
        (("--add", "x:"), "expected NAME:TYPE[=DEFAULT]"),
        (("--add", "x:=3"), "expected NAME:TYPE[=DEFAULT]"),
        (("--add", "x:text"), "--add x:text: unknown column type 'text'"),
        (("--add", "x:int64=abc"), "--add x:int64=abc: default 'abc' is not an integer"),
        (("--add-required", "x:int64"), "a required column needs a default"),
        (("--drop", " "), "--drop  : expected a column name"),
        (("--rename", "a"), "--rename a: expected OLD:NEW"),
        (("--rename", "a:"), "expected OLD:NEW"),
        (("--widen", "a:int128"), "unknown column type 'int128'"),
        (("--doc", "nocolon"), "expected NAME:TEXT"),
        (("--after", "a"), "expected NAME:OTHER"),
        (("--before", ":b"), "expected NAME:OTHER"),
    ],
)
def test_a_malformed_operation_names_itself(operation: tuple[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_operations([("--drop", "fine"), operation])
    assert message in str(raised.value)


def test_alter_needs_an_operation(capsys: pytest.CaptureFixture[str]) -> None:
    # Refused before any connection is made (no database here).
    assert main(["alter", "t", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error.startswith("firn alter needs at least one operation (--add, ")
    assert main(["alter", "t", "--add", "x:nope"]) == 1
    assert "unknown column type 'nope'" in capsys.readouterr().err


# --- what the operations do to a definition


def orders() -> TableSchema:
    schema = pa.schema(
        [
            pa.field("region", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("qty", pa.int32()),
            pa.field("note", pa.string()),
        ]
    )
    return TableSchema.build("orders", schema, ["region", "id"], ["region"])


def alter(*operations: tuple[str, str]) -> tuple[SchemaChange, TableSchema]:
    change = SchemaChange(orders())
    apply_operations(change, parse_operations(operations))
    return change, change.apply()


def test_operations_apply_in_order_as_one_version() -> None:
    change, result = alter(
        ("--add", "discount:decimal(12,2)=0.5"),
        ("--doc", "discount:in EUR: before tax"),
        ("--rename", "note:comment"),
        ("--widen", "qty:int64"),
        ("--after", "discount:id"),
        ("--add-required", "shipped:date32=2024-01-31"),
        ("--first", "shipped"),
    )
    assert result.schema_id == 1
    assert result.schema.names == ["shipped", "region", "id", "discount", "qty", "comment"]
    assert result.schema.field("qty").type == pa.int64()
    discount = result.schema.field("discount")
    assert discount.type == pa.decimal128(12, 2)
    assert default_json(discount) == "0.50"
    assert field_id(discount) == 5
    assert field_id(result.schema.field("comment")) == 4  # a rename keeps the id
    assert not result.schema.field("shipped").nullable
    assert change.operations[0] == "add discount decimal128(12, 2)"
    columns = {c.name: c for c in describe_columns(result.schema, result.primary_key, ["region"])}
    assert columns["discount"].doc == "in EUR: before tax"
    assert (columns["discount"].default, columns["discount"].default_text) == ("0.50", "0.50")
    assert columns["shipped"].default == "2024-01-31"
    assert columns["shipped"].required
    assert (columns["region"].key, columns["region"].partition) == (True, True)
    assert (columns["id"].key, columns["id"].partition) == (True, False)
    assert columns["comment"].default is None
    assert columns["comment"].default_text is None


def test_defaults_read_as_people_write_them() -> None:
    _, result = alter(
        ("--add", "flag:bool=false"),
        ("--add", "label:string="),
        ("--add", "at:timestamp[us, tz=UTC]=2024-01-01T12:00:00"),
        ("--add", "raw:binary=00ff"),
        ("--add", "ratio:float64=0.25"),
    )
    shown = {c.name: (c.default, c.default_text) for c in describe_columns(result.schema, (), ())}
    assert shown["flag"] == (False, "false")
    assert shown["label"] == ("", '""')
    assert shown["at"] == ("2024-01-01T12:00:00+00:00", "2024-01-01T12:00:00+00:00")
    assert shown["raw"] == ("00ff", "00ff")
    assert shown["ratio"] == (0.25, "0.25")
    # What is shown is what --add takes back.
    at = result.schema.field("at")
    assert parse_default(str(shown["at"][0]), at.type) == dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        (("--drop", "id"), "--drop id: cannot delete column 'id': it is a primary key column"),
        (("--drop", "region"), "it is a partition column"),
        (("--widen", "note:int64"), "--widen note:int64: cannot change column 'note' from string"),
        (("--widen", "qty:int16"), "only lossless widenings"),
        (("--rename", "region:zone"), "it is a partition column"),
        (("--rename", "note:qty"), "already has a column 'qty'"),
        (("--drop", "nope"), "has no column 'nope'"),
        (("--after", "qty:qty"), "relative to itself"),
        (("--add", "id:int64"), "already has a column 'id'"),
        (("--add", "tiny:int8=300"), "default 300 of column 'tiny' is not a value of its type"),
        (("--optional", "id"), "it is a primary key column"),
    ],
)
def test_a_refused_operation_names_itself(operation: tuple[str, str], message: str) -> None:
    change = SchemaChange(orders())
    with pytest.raises(ConfigError) as raised:
        apply_operations(change, parse_operations([("--add", "x:int64"), operation]))
    assert message in str(raised.value)


def test_operations_that_change_nothing_make_no_version() -> None:
    change, result = alter(("--rename", "note:note"), ("--widen", "qty:int32"))
    assert result is change.current
