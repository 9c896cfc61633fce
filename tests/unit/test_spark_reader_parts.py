"""The Spark reader's pure parts: Spark's pushed filters in Firn's form, the read
options, the Spark types of Firn's columns, and what an executor imports to read."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import datasource as sds
from pyspark.sql.types import (
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from firn.engine.shipping import firn_zip
from firn.engine.splits import Split
from firn.errors import ConfigError
from firn.model.files import FileEntry
from firn.model.filters import ArrowFilter, Compare, In, IsNull, Not, to_expression
from firn.model.schema import TableSchema
from firn.model.tree import ROOT
from firn.spark.jvm import jvm_key_type
from firn.spark.pushdown import Unsupported, always, convert, exact_for_changes, from_jvm, push
from firn.spark.reader import PARTITION_ROWS, packed, read_options, spark_type

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), False),
        pa.field("id", pa.int64(), False),
        pa.field("day", pa.date32()),
        pa.field("amount", pa.decimal128(12, 2)),
        pa.field("n", pa.int32()),
        pa.field("blob", pa.binary()),
    ]
)


@pytest.mark.parametrize(
    ("spark", "firn"),
    [
        (sds.EqualTo(("id",), 5), Compare("id", "=", 5)),
        (sds.GreaterThan(("id",), 5), Compare("id", ">", 5)),
        (sds.GreaterThanOrEqual(("id",), 5), Compare("id", ">=", 5)),
        (sds.LessThan(("region",), "m"), Compare("region", "<", "m")),
        (sds.LessThanOrEqual(("id",), 5), Compare("id", "<=", 5)),
        (sds.EqualNullSafe(("id",), 5), Compare("id", "=", 5)),
        (sds.EqualNullSafe(("n",), None), IsNull("n")),
        (sds.In(("id",), [1, 2]), In("id", (1, 2))),
        (sds.IsNull(("n",)), IsNull("n")),
        (sds.IsNotNull(("n",)), IsNull("n", negated=True)),
        (sds.Not(sds.EqualTo(("id",), 5)), Not(Compare("id", "=", 5))),
        (sds.EqualTo(("day",), dt.date(2024, 1, 2)), Compare("day", "=", dt.date(2024, 1, 2))),
        (sds.EqualTo(("amount",), Decimal("1.50")), Compare("amount", "=", Decimal("1.50"))),
    ],
)
def test_spark_filters_become_firn_filters(spark: sds.Filter, firn: object) -> None:
    assert convert(spark, SCHEMA) == firn


@pytest.mark.parametrize(
    "spark",
    [
        sds.EqualTo(("a", "b"), 1),  # a nested column
        sds.In(("id",), [1, None]),  # NULL in an IN list: left to Spark
        sds.EqualTo(("id",), None),
        sds.EqualTo(("id",), "five"),  # a literal that is not of the column's type
        sds.StringStartsWith(("id",), "1"),  # a string test on a number
        sds.Not(sds.In(("id",), [None])),
    ],
)
def test_filters_without_an_exact_firn_form_stay_with_spark(spark: sds.Filter) -> None:
    assert convert(spark, SCHEMA) is None


def test_string_tests_become_arrow_filters_that_filter_rows() -> None:
    rows = pa.table({"region": ["eu-1", "us-1", "xeu"]}).cast(pa.schema([SCHEMA.field("region")]))
    for spark, expected in [
        (sds.StringStartsWith(("region",), "eu"), ["eu-1"]),
        (sds.StringEndsWith(("region",), "-1"), ["eu-1", "us-1"]),
        (sds.StringContains(("region",), "eu"), ["eu-1", "xeu"]),
    ]:
        f = convert(spark, SCHEMA)
        assert isinstance(f, ArrowFilter)
        assert f.referenced == {"region"}
        got = rows.filter(to_expression(f, SCHEMA)).column("region").to_pylist()
        assert got == expected


def test_push_keeps_what_it_cannot_answer_exactly() -> None:
    on_key = sds.EqualTo(("id",), 5)
    on_value = sds.GreaterThan(("n",), 1)
    odd = sds.EqualTo(("a", "b"), 1)
    pushed, kept = push([on_key, on_value, odd], SCHEMA, exact_for=always)
    assert pushed == [Compare("id", "=", 5), Compare("n", ">", 1)]
    assert kept == [odd]
    # A change read answers key conditions exactly; a value condition prunes but
    # Spark applies it again (a delete row has no values).
    key = frozenset({"region", "id"})
    pushed, kept = push([on_key, on_value, odd], SCHEMA, exact_for=exact_for_changes(key))
    assert pushed == [Compare("id", "=", 5), Compare("n", ">", 1)]
    assert kept == [on_value, odd]
    assert all(k is f for k, f in zip(kept, [on_value, odd], strict=True)), "by reference"


@pytest.mark.parametrize(
    ("jvm", "spark"),
    [
        ({"filter": "EqualTo", "column": ["id"], "value": 5}, sds.EqualTo(("id",), 5)),
        (
            {"filter": "LessThan", "column": ["region"], "value": "m"},
            sds.LessThan(("region",), "m"),
        ),
        (
            {"filter": "GreaterThanOrEqual", "column": ["day"], "value": {"date": "2026-12-04"}},
            sds.GreaterThanOrEqual(("day",), dt.date(2026, 12, 4)),
        ),
        (
            {"filter": "EqualTo", "column": ["blob"], "value": {"binary": "AAH/"}},
            sds.EqualTo(("blob",), b"\x00\x01\xff"),
        ),
        (
            {"filter": "EqualTo", "column": ["amount"], "value": {"decimal": "-12.50"}},
            sds.EqualTo(("amount",), Decimal("-12.50")),
        ),
        (
            {
                "filter": "In",
                "column": ["amount"],
                "values": [{"decimal": "1E+2"}, {"decimal": "0.01"}],
            },
            sds.In(("amount",), (Decimal(100), Decimal("0.01"))),
        ),
        (
            {"filter": "EqualNullSafe", "column": ["n"], "value": None},
            sds.EqualNullSafe(("n",), None),
        ),
        ({"filter": "In", "column": ["id"], "values": [1, 2]}, sds.In(("id",), (1, 2))),
        ({"filter": "IsNull", "column": ["n"]}, sds.IsNull(("n",))),
        ({"filter": "IsNotNull", "column": ["n"]}, sds.IsNotNull(("n",))),
        (
            {"filter": "Not", "child": {"filter": "EqualTo", "column": ["id"], "value": 1}},
            sds.Not(sds.EqualTo(("id",), 1)),
        ),
        (
            {"filter": "StringStartsWith", "column": ["region"], "value": "e"},
            sds.StringStartsWith(("region",), "e"),
        ),
    ],
)
def test_the_jvm_readers_filters_are_read_as_spark_gives_a_python_source(
    jvm: dict[str, object], spark: sds.Filter
) -> None:
    """``org.firn.spark.PushedFilters``' JSON, read back as the Python data source API's
    filters, which then take the same way to Firn's form."""
    assert from_jvm(jvm) == spark
    # (Arrow expressions, which a string test becomes, compare by their text.)
    assert str(convert(from_jvm(jvm), SCHEMA)) == str(convert(spark, SCHEMA)) != "None"


@pytest.mark.parametrize(
    "jvm",
    [
        {"filter": "Or", "left": {}, "right": {}},
        {"filter": "EqualTo", "column": ["ts"], "value": {"timestamp": 1}},
        {"filter": "EqualTo", "column": ["blob"], "value": {"binary": "not base64!"}},
        {"filter": "EqualTo", "column": ["amount"], "value": {"decimal": "twelve"}},
        {"filter": "EqualTo", "column": ["amount"], "value": {"decimal": "NaN"}},
        {"filter": "Not", "child": {"filter": "And"}},
    ],
)
def test_jvm_filters_without_a_form_here_are_refused(jvm: dict[str, object]) -> None:
    with pytest.raises(Unsupported):
        from_jvm(jvm)


def test_read_options() -> None:
    opts = read_options(
        {"path": "orders", "Snapshot": "4", "columns": "id, region", "database_url": "pg://x"}
    )
    assert (opts.table, opts.snapshot, opts.columns) == ("orders", 4, ("id", "region"))
    assert opts.settings == {"database_url": "pg://x"}
    assert not opts.changes
    assert not opts.pushdown
    changes = read_options({"path": "t", "start_snapshot": "2", "pushdown": "TRUE"})
    assert changes.changes
    assert changes.end_snapshot is None
    assert changes.pushdown
    assert opts.partition_rows == PARTITION_ROWS
    assert read_options({"path": "t", "partition_rows": "1"}).partition_rows == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "name the table"),
        ({"path": "t", "snapshot": "x"}, "snapshot id"),
        ({"path": "t", "snapshot": "-1"}, "snapshot id"),
        ({"path": "t", "snapshot": "1", "start_snapshot": "0"}, "one or the other"),
        ({"path": "t", "end_snapshot": "3"}, "needs start_snapshot"),
        ({"path": "t", "pushdown": "maybe"}, "true or false"),
        ({"path": "t", "partition_rows": "0"}, "at least 1"),
        ({"path": "t", "partition_rows": "1e6"}, "whole number"),
    ],
)
def test_bad_read_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_options(options)


def split_of(i: int, rows: int) -> Split:
    table = TableSchema("t", pa.schema([pa.field("id", pa.int64(), False)]), ("id",))
    entry = FileEntry(i, "", "base", "B", ROOT, 0, f"f{i}", 1, rows, None, None, 1)
    return Split("/t", table, (entry,), {"": 0}, ("id",))


@given(st.lists(st.integers(0, 12), max_size=30), st.integers(1, 20))
def test_small_splits_are_packed_into_tasks_in_order(sizes: list[int], limit: int) -> None:
    splits = [split_of(i, rows) for i, rows in enumerate(sizes)]
    groups = packed(splits, limit)
    assert [s for g in groups for s in g] == splits  # each split once, in order
    held = [sum(s.rows for s in g) for g in groups]
    for group, rows in zip(groups, held, strict=True):
        assert group
        assert rows <= limit or len(group) == 1
    for rows, following in zip(held, groups[1:], strict=False):
        assert rows + following[0].rows > limit  # a group ends only when full


def test_spark_types_of_firn_columns() -> None:
    assert spark_type("a", pa.int64()) == LongType()
    assert spark_type("a", pa.uint16()) == IntegerType()
    assert spark_type("a", pa.large_string()) == StringType()
    assert spark_type("a", pa.date64()) == DateType()
    assert spark_type("a", pa.decimal128(12, 2)) == DecimalType(12, 2)
    assert spark_type("a", pa.timestamp("ms", "Europe/Paris")) == TimestampType()
    assert spark_type("a", pa.timestamp("us")) == TimestampNTZType()
    with pytest.raises(ConfigError, match="uint64"):
        spark_type("a", pa.uint64())


@pytest.mark.parametrize(
    ("key", "taken"),
    [
        (pa.int64(), True),
        (pa.int8(), True),
        (pa.uint32(), True),
        (pa.date32(), True),
        (pa.timestamp("us", "UTC"), True),
        (pa.timestamp("us"), True),
        (pa.uint64(), False),  # Spark has no type for its upper half
        (pa.timestamp("ms"), False),  # Spark reads it as microseconds, which hash otherwise
        (pa.timestamp("ns"), False),
        (pa.date64(), False),
        (pa.string(), True),  # hashed and ordered by its UTF-8 bytes, as Firn does
        (pa.large_string(), True),
        (pa.binary(), True),  # hashed and ordered by its bytes, as a string's
        (pa.large_binary(), True),
        (pa.binary(16), False),  # fixed size: left to the Python source
        (pa.decimal128(12, 2), True),  # by its unscaled value, as FirnHash64 hashes it
        (pa.decimal128(38, 0), True),
        (pa.decimal256(40, 0), False),  # FirnHash64 takes decimal128 only
    ],
)
def test_the_jvm_reader_takes_keys_it_hashes_and_orders_as_firn_does(
    key: pa.DataType, taken: bool
) -> None:
    assert jvm_key_type(key) == taken


def test_an_executor_imports_the_reader_from_the_zip_without_pydantic_or_postgres(
    tmp_path: Path,
) -> None:
    """Spark unpickles the reader in a worker that has pyspark, pyarrow and numpy
    only, with Firn from the shipped zip: the reader's module must import there."""
    script = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pydantic", "pydantic_core", "pydantic_settings",
                                          "psycopg", "confluent_kafka", "faust"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        sys.path.insert(0, {str(firn_zip())!r})
        import firn.spark.reader, firn.spark.source, firn.spark
        assert firn.__file__.startswith({str(firn_zip())!r}), firn.__file__
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
