"""Splitting a change set into change files: by partition, node and operation."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from firn.engine.staging import (
    SNAPPY_BELOW_BYTES,
    change_codec,
    file_name,
    split_changes,
    write_group,
)
from firn.io.storage import Storage
from firn.model.changes import validate_changes
from firn.model.keyhash import hash_keys
from firn.model.schema import TableSchema
from firn.model.tree import ROOT
from tests.changesets import KEY_KINDS, KeyKind, as_change_set, operations, table_schema


@given(
    kind=st.sampled_from(KEY_KINDS),
    buckets=st.sampled_from([1, 2, 4, 16]),
    split_rows=st.sampled_from([0, 1, 4, 1000]),
    data=st.data(),
)
def test_every_row_lands_in_exactly_one_sorted_file_of_its_node(
    kind: KeyKind, buckets: int, split_rows: int, data: st.DataObject
) -> None:
    table = TableSchema.build("t", table_schema(kind), ["part", "k"], ["part"])
    ops = data.draw(operations(kind, max_size=40))
    changes = validate_changes(table, as_change_set(ops, table.schema))
    groups = split_changes(table, buckets, changes, split_rows)
    seen = sorted(o for g in groups for o in g.rows.column("_ord").to_pylist())
    assert seen == list(range(len(ops)))
    per_partition = Counter(str(op["part"]) for op in ops)
    files = Counter((g.partition_key, g.file_type) for g in groups)
    for group in groups:
        rows = group.rows
        # A partition with fewer than split_rows rows is one file per operation at
        # its root; the others one per change node.
        whole = per_partition[group.partition_values["part"]] < split_rows
        assert group.node.m == (1 if whole else buckets)
        if whole:
            assert files[(group.partition_key, group.file_type)] == 1
        keys = [rows.column("part"), rows.column("k")]
        assert group.node.contains(hash_keys(keys)).all()
        assert set(rows.column("part").to_pylist()) == {group.partition_values["part"]}
        assert group.partition_key == f"part={group.partition_values['part']}"
        expected_columns = (
            [*table.schema.names, "_ord"] if group.file_type == "I" else ["part", "k", "_ord"]
        )
        assert rows.column_names == expected_columns
        wanted_op = "U" if group.file_type == "I" else "D"
        assert all(ops[o]["_op"] == wanted_op for o in rows.column("_ord").to_pylist())
        k, o = rows.column("k").to_pylist(), rows.column("_ord").to_pylist()
        order = list(zip(k, o, strict=True))
        assert order == sorted(order)


def test_unkeyed_tables_write_at_the_root() -> None:
    schema = pa.schema([pa.field("v", pa.int64())])
    table = TableSchema.build("log", schema, [])
    changes = validate_changes(table, pa.table({"v": [3, 1, 2], "_op": ["U", "U", "U"]}))
    (group,) = split_changes(table, 4, changes)
    assert group.node == ROOT
    assert group.partition_key == ""
    assert group.rows.column("_ord").to_pylist() == [0, 1, 2]


def test_change_files_encode_keys_by_delta_and_only_strings_by_dictionary(tmp_path: Path) -> None:
    """A change file takes base files' encodings: its integer key and ``_ord`` delta
    encoded, a dictionary only on value strings (on unique keys and numbers it costs
    time and bytes); the rows read back are the group's."""
    schema = pa.schema(
        [
            pa.field("part", pa.string(), nullable=False),
            pa.field("k", pa.int64(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("n", pa.float64()),
        ]
    )
    table = TableSchema.build("t", schema, ["part", "k"], ["part"])
    rows = pa.table(
        {
            "part": ["eu"] * 300,
            "k": range(300),
            "name": [f"v{i % 3}" for i in range(300)],
            "n": [i / 7 for i in range(300)],
            "_op": ["U", "U", "D"] * 100,
        }
    )
    storage = Storage(str(tmp_path))
    groups = split_changes(table, 1, validate_changes(table, rows), 0)
    assert {g.file_type for g in groups} == {"I", "D"}
    for group in groups:
        path = file_name(group)
        write_group(table, storage, group, path)
        chunks = pq.ParquetFile(tmp_path / path).metadata.row_group(0)
        encodings = {
            chunks.column(c).path_in_schema: chunks.column(c).encodings
            for c in range(chunks.num_columns)
        }
        for name in ("k", "_ord"):
            assert "DELTA_BINARY_PACKED" in encodings[name], (group.file_type, name)
        dictionary = {name for name, found in encodings.items() if "RLE_DICTIONARY" in found}
        assert dictionary == ({"name"} if group.file_type == "I" else set()), group.file_type
        assert pq.read_table(tmp_path / path).equals(group.rows)


def test_change_files_take_the_tables_codec_but_small_zstd_files_are_snappy() -> None:
    small, large = SNAPPY_BELOW_BYTES - 1, SNAPPY_BELOW_BYTES
    assert [change_codec(c, small) for c in ("lz4", "zstd", "snappy")] == [
        "lz4",
        "snappy",
        "snappy",
    ]
    assert [change_codec(c, large) for c in ("lz4", "zstd", "snappy")] == ["lz4", "zstd", "snappy"]
