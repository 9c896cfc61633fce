"""Reading a snapshot's change files from real storage, with and without ``_seq``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from firn.engine.scan import read_inputs
from firn.io.storage import Storage
from firn.model.files import FileEntry
from firn.model.schema import TableSchema
from firn.model.tree import Node

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
TABLE = TableSchema.build("t", SCHEMA, ["id"])


def write(storage: Storage, path: str, rows: pa.Table) -> tuple[str, int, int]:
    """Write a file; its path, size and record count, as the catalog records them."""
    return path, storage.write_parquet(path, rows), rows.num_rows


def entry(file_id: int, file: tuple[str, int, int], seq: int, file_type: str = "I") -> FileEntry:
    path, size, records = file
    return FileEntry(
        file_id, "", "change", file_type, Node(1, 0), seq, path, size, records, None, None, 1
    )


def test_row_level_seqs_override_the_file_seq_and_merged_rows_are_dropped(
    tmp_path: Path,
) -> None:
    storage = Storage(str(tmp_path))
    # A minor-compaction output: rows of seqs 3, 5 and 7 in one file (file seq = 7).
    minor = write(
        storage,
        "minor.parquet",
        pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"], "_ord": [0, 0, 0], "_seq": [3, 5, 7]}),
    )
    # Producer files of seqs 4 (merged already) and 8.
    p4 = write(storage, "p4.parquet", pa.table({"id": [4], "v": ["d"], "_ord": [0]}))
    p8 = write(storage, "p8.parquet", pa.table({"id": [5, 6], "v": ["e", "f"], "_ord": [0, 1]}))
    d8 = write(storage, "d8.parquet", pa.table({"id": [1], "_ord": [2]}))
    entries = [entry(1, minor, 7), entry(2, p4, 4), entry(3, p8, 8), entry(4, d8, 8, "D")]
    inputs = read_inputs(storage, TABLE, entries, {"": 4})
    assert inputs.base is None
    got = sorted(zip(*(inputs.inserts.column(c).to_pylist() for c in ("id", "_seq")), strict=True))
    assert got == [(2, 5), (3, 7), (5, 8), (6, 8)]
    assert inputs.inserts.schema.field("_seq").nullable is False
    assert inputs.deletes.to_pylist() == [{"id": 1, "_ord": 2, "_seq": 8}]
