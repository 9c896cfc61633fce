"""Reading the files of one snapshot into the three inputs of the merge.

Change files are read as one ``pyarrow.dataset`` scan per file type (parallel, with
read-ahead), not file by file: the per-call overhead of opening files one at a time
was more than half of ``read()``'s time over 100 small files. The scan's schema has
an optional ``_seq`` column, null in files that do not store one; each batch knows
its file, and so gets the file's seq where ``_seq`` is null.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from firn.catalog.files import FileEntry
from firn.errors import StorageError
from firn.io.storage import Storage
from firn.table.changes import ORD
from firn.table.merge_on_read import SEQ
from firn.table.schema import TableSchema


@dataclass(frozen=True)
class MergeInputs:
    base: pa.Table | None
    """Live base rows, table columns."""
    inserts: pa.Table
    """Unmerged upserts: table columns, ``_ord``, ``_seq``."""
    deletes: pa.Table
    """Unmerged deletes: key columns, ``_ord``, ``_seq``."""


def change_schema(table: TableSchema, file_type: str) -> pa.Schema:
    """The columns of unmerged change rows of one type, as the merge takes them."""
    schema = table.schema if file_type == "I" else table.key_schema
    return schema.append(pa.field(ORD, pa.int64(), False)).append(pa.field(SEQ, pa.int64(), False))


def read_inputs(
    storage: Storage,
    table: TableSchema,
    entries: Sequence[FileEntry],
    merged_seqs: dict[str, int],
) -> MergeInputs:
    """Base files whole; change files with seq > their partition's max_merged_seq."""
    base = [e for e in entries if e.store == "base"]
    # A change file's seq is the greatest seq of its rows, so a file at or below the
    # partition's max_merged_seq holds nothing unmerged.
    changes = [
        e for e in entries if e.store == "change" and e.seq > merged_seqs.get(e.partition_key, 0)
    ]
    inserts = [e for e in changes if e.file_type == "I"]
    deletes = [e for e in changes if e.file_type == "D"]
    return MergeInputs(
        base=_scan(storage, base, table.schema) if base else None,
        inserts=_scan_changes(storage, table, inserts, "I", merged_seqs),
        deletes=_scan_changes(storage, table, deletes, "D", merged_seqs),
    )


def _dataset(storage: Storage, entries: Sequence[FileEntry], schema: pa.Schema) -> ds.Dataset:
    paths = [storage.full_path(e.path) for e in entries]
    try:
        return ds.dataset(paths, schema=schema, format="parquet", filesystem=storage.fs)
    except OSError as exc:
        raise StorageError(f"cannot open table files under {storage.root}: {exc}") from exc


def _scan(storage: Storage, entries: Sequence[FileEntry], schema: pa.Schema) -> pa.Table:
    try:
        return _dataset(storage, entries, schema).to_table()
    except OSError as exc:
        raise StorageError(f"cannot read table files under {storage.root}: {exc}") from exc


def _scan_changes(
    storage: Storage,
    table: TableSchema,
    entries: Sequence[FileEntry],
    file_type: str,
    merged_seqs: dict[str, int],
) -> pa.Table:
    target = change_schema(table, file_type)
    if not entries:
        return target.empty_table()
    # _seq is nullable in the scan: files written by producers do not have it.
    scan_schema = target.set(target.get_field_index(SEQ), pa.field(SEQ, pa.int64(), True))
    by_path = {storage.full_path(e.path): e for e in entries}
    batches = []
    try:
        for tagged in _dataset(storage, entries, scan_schema).scanner().scan_batches():
            entry = by_path[tagged.fragment.path]
            batch = tagged.record_batch
            seqs = batch.column(SEQ)
            if seqs.null_count == len(seqs):
                seqs = pa.array(np.full(len(batch), entry.seq, dtype=np.int64))
            else:
                seqs = pc.fill_null(seqs, entry.seq)
            batch = batch.set_column(batch.schema.get_field_index(SEQ), SEQ, seqs)
            floor = merged_seqs.get(entry.partition_key, 0)
            if pc.min(seqs).as_py() <= floor:
                batch = batch.filter(pc.greater(seqs, floor))
            batches.append(batch)
    except OSError as exc:
        raise StorageError(f"cannot read table files under {storage.root}: {exc}") from exc
    return pa.Table.from_batches(batches, scan_schema).cast(target)
