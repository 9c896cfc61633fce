"""The JVM loader's driver-side pure parts (``firn.spark.load``): which loads it takes,
the plan it is handed, and its files as the catalog registers them."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pyarrow as pa
import pytest

from firn.errors import ConfigError
from firn.model.schema import TableSchema, field_id
from firn.model.tree import Node
from firn.spark.load import keyable, load_plan, staged_files, unloadable, writable
from firn.spark.tasks import WriteJob

SCHEMA = pa.schema(
    [
        pa.field("day", pa.date32(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("at", pa.timestamp("us", "UTC")),
    ]
)


def job(
    schema: pa.Schema = SCHEMA, key: tuple[str, ...] = ("day", "id"), **changes: Any
) -> WriteJob:
    table = TableSchema.build("t", schema, list(key), ["day"] if "day" in key else [])
    made = WriteJob(
        table="t",
        table_id=1,
        location="/wh/t",
        definition=table,
        change_buckets=4,
        base_buckets=4,
        target_file_size=128 << 20,
        staged_dir="load/abc/",
        overwrite=True,
        op=None,
        order_by=None,
        compression="lz4",
    )
    return dataclasses.replace(made, **changes)


def test_the_plan_carries_field_ids_key_partition_and_codec() -> None:
    plan = json.loads(load_plan(job(), "tok"))
    assert plan["token"] == "tok"
    assert plan["staged"] == "file:///wh/t/load/abc/"
    assert plan["key"] == ["day", "id"]
    assert plan["partition"] == ["day"]
    assert (plan["buckets"], plan["target"], plan["codec"]) == (4, 128 << 20, "LZ4_RAW")
    fields = plan["schema"]["fields"]
    assert [f["name"] for f in fields] == SCHEMA.names
    ids = [field_id(f) for f in job().definition.schema]
    assert [f["metadata"]["parquet.field.id"] for f in fields] == ids
    assert [f["type"] for f in fields] == ["date", "long", "string", "timestamp"]
    assert [f["nullable"] for f in fields] == [False, False, True, True]
    assert "at most one row per key" in plan["rule"]


@pytest.mark.parametrize(
    ("changes", "columns", "reason"),
    [
        ({}, ["id", "day", "name"], "not exactly the table's"),
        ({"compression": "gzip"}, SCHEMA.names, "file.compression gzip"),
        ({"base_buckets": 128}, SCHEMA.names, "base.buckets 128 is over 64"),
        ({"location": "ftp://host/t"}, SCHEMA.names, "not one Hadoop's file systems name"),
    ],
)
def test_what_the_loader_leaves_to_the_firn_source(
    changes: dict[str, Any], columns: list[str], reason: str
) -> None:
    assert unloadable(job(), SCHEMA.names) is None
    found = unloadable(job(**changes), columns)
    assert found is not None
    assert reason in found


def test_key_and_column_types_the_loader_takes() -> None:
    decimal_key = pa.schema([pa.field("id", pa.decimal128(10, 2), nullable=False)])
    assert unloadable(job(decimal_key, ("id",)), ["id"]) is None
    # job() partitions by "day": here a decimal, which the loader's paths do not spell.
    decimal_part = pa.schema([pa.field("day", pa.decimal128(10, 2), nullable=False), *decimal_key])
    found = unloadable(job(decimal_part, ("day", "id")), ["day", "id"])
    assert "key or partition column 'day'" in str(found)
    unsigned = SCHEMA.append(pa.field("n", pa.uint32()))
    assert "column 'n'" in str(unloadable(job(unsigned), unsigned.names))
    assert "no primary key" in str(unloadable(job(SCHEMA, ()), SCHEMA.names))
    assert all(keyable(t) for t in (pa.int8(), pa.int32(), pa.date32(), pa.string()))
    assert keyable(pa.timestamp("us"))
    assert not keyable(pa.timestamp("ms"))
    assert not any(keyable(t) for t in (pa.uint8(), pa.large_binary(), pa.large_string()))
    assert keyable(pa.binary())  # a key column's bytes, hashed and ordered as a string's
    assert not keyable(pa.binary(), partition=True)
    assert keyable(pa.decimal128(38, 0))  # by its unscaled value, as FirnHash64 hashes it
    assert not keyable(pa.decimal128(12, 2), partition=True)
    assert writable(pa.decimal128(20, 3))
    assert writable(pa.float32())
    assert writable(pa.binary())
    assert not writable(pa.timestamp("us", "Europe/Paris"))
    assert not writable(pa.list_(pa.int64()))


def test_files_become_staged_files_of_their_partition_and_node() -> None:
    written = [
        {
            "path": "p00000-a0-x/day=2024-02-29/B-4-3-00000.parquet",
            "partition": [19782],
            "node": [4, 3],
            "rows": 10,
            "size": 1234,
            "first": [19782, -5],
            "last": [19782, 9],
        },
    ]
    (f,) = staged_files(job(), written)
    assert f.partition_key == "day=2024-02-29"
    assert f.partition_values == {"day": "2024-02-29"}
    assert f.node == Node(4, 3)
    assert f.path == "load/abc/p00000-a0-x/day=2024-02-29/B-4-3-00000.parquet"
    assert (f.file_type, f.record_count, f.size_bytes) == ("B", 10, 1234)
    assert (f.min_key, f.max_key) == ([19782, -5], [19782, 9])


def test_a_partition_value_no_path_can_hold_is_refused() -> None:
    schema = pa.schema([pa.field("day", pa.string(), False), pa.field("id", pa.int64(), False)])
    written = [
        {
            "path": "x",
            "partition": ["a\x00b"],
            "node": [1, 0],
            "rows": 1,
            "size": 1,
            "first": ["a\x00b", 1],
            "last": ["a\x00b", 1],
        }
    ]
    with pytest.raises(ConfigError, match="NUL character"):
        staged_files(job(schema), written)
