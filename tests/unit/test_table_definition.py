"""Table definitions and properties are checked before anything is written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from firn.errors import ConfigError
from firn.model.properties import MiB, TableProperties
from firn.model.schema import TableSchema

KEY = pa.field("id", pa.int64(), nullable=False)
REGION = pa.field("region", pa.string(), nullable=False)
SCHEMA = pa.schema(
    [KEY, REGION, pa.field("amount", pa.decimal128(12, 2)), pa.field("note", pa.string())]
)


def test_a_good_definition_round_trips_its_schema() -> None:
    table = TableSchema.build("orders", SCHEMA, ["region", "id"], ["region"])
    assert table.keyed
    assert table.key_schema.names == ["region", "id"]
    assert TableSchema.schema_from_ipc(table.to_ipc()).equals(SCHEMA)


def test_an_unkeyed_table_is_allowed() -> None:
    assert not TableSchema.build("events", SCHEMA, []).keyed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "9lives"}, "must start with a letter"),
        ({"schema": "not a schema"}, "pyarrow.Schema"),
        ({"primary_key": ["missing"]}, "not in the schema"),
        ({"primary_key": ["note"]}, "non-nullable"),
        ({"primary_key": ["id", "id"]}, "duplicate primary key"),
        ({"primary_key": "id"}, "sequences of column names"),
        ({"partition_by": ["note"]}, "must be part of the primary key"),
        ({"partition_by": ["nowhere"]}, "not in the schema"),
        ({"schema": pa.schema([pa.field("id", pa.float64(), nullable=False)])}, "cannot be a key"),
        ({"schema": pa.schema([KEY, pa.field("tags", pa.list_(pa.string()))])}, "unsupported type"),
        ({"schema": pa.schema([KEY, pa.field("_op", pa.string())])}, "reserved"),
        ({"schema": pa.schema([KEY, KEY])}, "duplicate column names"),
    ],
)
def test_bad_definitions_are_refused(kwargs: dict, message: str) -> None:
    args = {"name": "orders", "schema": SCHEMA, "primary_key": ["id"], "partition_by": [], **kwargs}
    with pytest.raises(ConfigError, match=message):
        TableSchema.build(**args)


def test_properties_have_the_spec_defaults() -> None:
    props = TableProperties.parse(None)
    assert (props.change_buckets, props.base_buckets) == (4, 4)
    assert props.target_file_size == 128 * MiB
    assert props.small_file_threshold == 16 * MiB
    assert (props.major_file_count, props.minor_file_count) == (12, 10)
    # A small partition's runs collect before a fold (a fleet of small tables).
    assert props.major_change_bytes_lowest == 64 * 1024
    assert props.task_lease == 60.0
    assert props.snapshot_retention == 12 * 3600
    assert props.orphan_retention == 2 * 86400


def test_retention_may_be_zero() -> None:
    props = TableProperties.parse({"snapshot.retention": 0, "orphan.retention": "0s"})
    assert (props.snapshot_retention, props.orphan_retention) == (0, 0)


def test_properties_accept_units_and_round_trip() -> None:
    props = TableProperties.parse(
        {"change.buckets": 8, "target-file-size": "64MiB", "major.interval-max": "2h"}
    )
    assert props.target_file_size == 64 * MiB
    assert props.major_interval_max == 7200
    assert TableProperties.parse(props.as_dict()) == props
    assert props.merged({"base.buckets": 16}).base_buckets == 16


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"change.buckets": 3}, "change.buckets.*power of two"),
        ({"base.buckets": 0}, "base.buckets"),
        ({"no.such": 1}, "no.such"),
        ({"target-file-size": "big"}, "not a size"),
        ({"task.lease": "-1s"}, "not a duration"),
        ({"major.delete-ratio": 0}, "major.delete-ratio"),
        ({"task.lease": 0}, "task.lease"),
        ({"snapshot.retention": -1}, "snapshot.retention"),
    ],
)
def test_bad_properties_are_named(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TableProperties.parse(values)


@pytest.mark.parametrize(
    "name", ["abc\n", "abc\n-2", "orders\r", "a" * 129, "", "a b", "a/b", "a\x00", "_x", "é"]
)
def test_table_names_are_matched_whole(name: str) -> None:
    with pytest.raises(ConfigError, match="table name"):
        TableSchema.build(name, SCHEMA, ["id"])


def test_the_longest_table_name_is_allowed() -> None:
    assert TableSchema.build("a" * 128, SCHEMA, ["id"]).name == "a" * 128


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("", "1 to 128 characters"),
        ("c" * 129, "1 to 128 characters"),
        ("a\nb", "control character"),
        ("note\n", "control character"),
        ("x\x00", "control character"),
        ("_firn_node", "reserved"),
    ],
)
def test_column_names_without_control_characters(column: str, message: str) -> None:
    schema = pa.schema([KEY, pa.field(column, pa.string())])
    with pytest.raises(ConfigError, match=message):
        TableSchema.build("orders", schema, ["id"])


def test_column_names_may_be_any_other_text() -> None:
    schema = pa.schema([KEY, pa.field("prix unitaire (€)", pa.float64())])
    assert TableSchema.build("orders", schema, ["id"]).schema.names[1] == "prix unitaire (€)"


def test_a_partition_column_name_leaves_room_for_its_values_in_a_path() -> None:
    long_name = pa.field("p" * 60, pa.string(), nullable=False)
    with pytest.raises(ConfigError, match="too long for a path"):
        TableSchema.build("orders", pa.schema([KEY, long_name]), ["id", "p" * 60], ["p" * 60])
    # Unpartitioned, the same name is only a column.
    assert TableSchema.build("orders", pa.schema([KEY, long_name]), ["id", "p" * 60])


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "utc", "Europe", "Europe/", "+24:00", "+5:30", "UTC\n", "../etc/x"]
)
def test_unknown_time_zones_are_refused(zone: str) -> None:
    schema = pa.schema([KEY, pa.field("at", pa.timestamp("us", tz=zone))])
    with pytest.raises(ConfigError, match="unknown time zone"):
        TableSchema.build("orders", schema, ["id"])


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/New_York", "+05:30", "-12:00"])
def test_known_time_zones_and_fixed_offsets_are_accepted(zone: str) -> None:
    schema = pa.schema([KEY, pa.field("at", pa.timestamp("us", tz=zone))])
    assert TableSchema.build("orders", schema, ["id"]).schema.field("at").type.tz == zone
