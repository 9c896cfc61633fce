"""The pure parts of publishing to Iceberg: identifiers, schema and partition values,
key bounds, which files need a copy, manifest names and which snapshots are kept."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.table.snapshots import Snapshot

from firn.errors import ConfigError
from firn.iceberg.names import iceberg_name
from firn.iceberg.publisher import _kept
from firn.iceberg.translate import (
    iceberg_schema,
    key_bounds,
    lacks_defaults,
    partition_record,
    partition_spec,
)
from firn.iceberg.writing import ManifestName
from firn.io.storage import file_uri
from firn.model.evolution import SchemaChange
from firn.model.schema import TableSchema

SCHEMA = pa.schema(
    [
        pa.field("day", pa.date32(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("amount", pa.decimal128(10, 2)),
    ]
)


def _table() -> TableSchema:
    return TableSchema.build("sales.orders", SCHEMA, ["day", "id"], ["day"])


def test_names_keep_their_dots_and_a_bare_name_goes_to_default() -> None:
    assert str(iceberg_name("sales.orders")) == "sales.orders"
    assert iceberg_name("a.b.c").namespace == ("a", "b")
    assert str(iceberg_name("orders")) == "default.orders"
    for bad in ("a..b", "a.", ".a"):
        with pytest.raises(ConfigError, match="no level may be empty"):
            iceberg_name(bad)


def test_schema_keeps_field_ids_types_and_the_key_as_identifier_fields() -> None:
    table = _table()
    schema = iceberg_schema(table)
    assert [f.name for f in schema.fields] == SCHEMA.names
    assert [f.field_id for f in schema.fields] == [table.field_id(n) for n in SCHEMA.names]
    assert set(schema.identifier_field_ids) == {table.field_id("day"), table.field_id("id")}
    assert schema.schema_id == table.schema_id
    spec = partition_spec(table, schema)
    assert [(f.name, f.source_id, f.field_id) for f in spec.fields] == [
        ("day", table.field_id("day"), 1000)
    ]


def test_partition_values_in_icebergs_representation() -> None:
    keyed = pa.schema([f.with_nullable(False) for f in SCHEMA])
    table = TableSchema.build(
        "t", keyed, ["day", "id", "at", "amount", "name"], ["day", "at", "amount", "name"]
    )
    record = partition_record(
        table,
        {
            "day": "2026-11-27",
            "at": "2026-11-27 01:02:03.000004+00:00",
            "amount": "12.50",
            "name": "a/b",
        },
    )
    moment = dt.datetime(2026, 11, 27, 1, 2, 3, 4, tzinfo=dt.UTC)
    assert record[0] == (dt.date(2026, 11, 27) - dt.date(1970, 1, 1)).days
    assert record[1] == (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
        microseconds=1
    )
    assert record[2] == Decimal("12.50")
    assert record[3] == "a/b"


def test_key_bounds_cover_the_leading_equal_columns_and_the_first_that_differs() -> None:
    table = _table()
    schema = iceberg_schema(table)
    lower, upper = key_bounds(table, schema, [20000, 5], [20000, 9])
    day, key = schema.find_field("day"), schema.find_field("id")
    assert from_bytes(day.field_type, lower[day.field_id]) == 20000
    assert from_bytes(key.field_type, lower[key.field_id]) == 5
    assert from_bytes(key.field_type, upper[key.field_id]) == 9
    lower, upper = key_bounds(table, schema, [20000, 5], [20001, 1])
    assert set(lower) == {day.field_id}  # the id range spans two days: no id bound
    assert key_bounds(table, schema, None, None) == ({}, {})


def test_only_files_lacking_a_defaulted_column_need_a_copy() -> None:
    table = _table()
    first = table.schema_id
    with_null = SchemaChange(table).add_column("note", pa.string()).apply()
    assert not lacks_defaults(with_null, first)
    with_default = SchemaChange(with_null).add_column("tier", pa.string(), "basic").apply()
    assert lacks_defaults(with_default, first)
    assert lacks_defaults(with_default, with_null.schema_id)
    assert not lacks_defaults(with_default, with_default.schema_id)


def test_manifest_names_round_trip_and_foreign_ones_are_not_ours() -> None:
    name = ManifestName("abc123", "x", "0123456789abcdef")
    assert ManifestName.parse(f"file:///w/t/_iceberg/metadata/{name.stem()}-9f8e.avro") == name
    assert ManifestName.parse("file:///w/t/metadata/3f2a-m0.avro") is None


def test_a_snapshot_is_kept_while_it_was_replaced_within_the_retention() -> None:
    def snap(i: int, ms: int) -> Snapshot:
        return Snapshot.model_validate(
            {"snapshot-id": i, "sequence-number": i, "timestamp-ms": ms, "manifest-list": "m"}
        )

    snaps = [snap(1, 1_000), snap(2, 5_000), snap(3, 9_000)]
    assert [s.snapshot_id for s in _kept(snaps, 4_000, 3)] == [1, 2, 3]  # 1 replaced at 5000
    assert [s.snapshot_id for s in _kept(snaps, 6_000, 3)] == [2, 3]  # 2 replaced at 9000
    assert [s.snapshot_id for s in _kept(snaps, 10_000, 3)] == [3]  # the current always


def test_file_uris_drop_the_query_and_give_local_paths_a_scheme() -> None:
    assert file_uri("/w/t", "a/b.parquet") == "file:///w/t/a/b.parquet"
    assert file_uri("s3://lake/t?region=eu", "a.parquet") == "s3://lake/t/a.parquet"
