"""Reading the files of one snapshot into the three inputs of the merge.

Change files are read as one ``pyarrow.dataset`` scan per file type (parallel, with
read-ahead), not file by file: the per-call overhead of opening files one at a time
was more than half of ``read()``'s time over 100 small files. The scan's schema has
an optional ``_seq`` column, null in files that do not store one; each batch knows
its file, and so gets the file's seq where ``_seq`` is null.

Integrity (``firn.io.integrity``): one ``get_file_info`` call checks that every file
exists with the size the catalog recorded, before any row is read; the rows of each
file are counted as they stream by and compared with its record count after the
scan; key and ``_ord`` columns may hold no null (a file lacking one reads as nulls).
A dataset scan's errors do not always name the file, so on a failure the files are
checked one by one to name the bad one (only on that error path).

A base file with a deletion vector (``firn.io.deletion_vectors``) is read on its
own, without the rows its vector hides (whole, or with a filter only the row groups
whose statistics may hold a row it keeps); the vector is checked too.

Files written under another schema version than the read's are read by field id
(``firn.model.projection``): one scan per version, each batch turned into the read's
columns. A filter is pushed only into the scans of the read's own version; the
others are filtered after the projection, where a column they lack holds its
default, so a file that lacks a column is judged by its default, as its rows read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from firn.errors import CorruptFileError, StorageError
from firn.io.deletion_vectors import live_matching, live_rows, read_positions
from firn.io.integrity import (
    IO,
    RECORD_COUNT,
    SCHEMA,
    check_sizes,
    inspect_file,
    read_matching,
    read_whole,
)
from firn.io.storage import Storage
from firn.model.changes import ORD
from firn.model.files import FileEntry
from firn.model.merge_on_read import SEQ
from firn.model.projection import FileView, file_view, stored_names
from firn.model.schema import TableSchema


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


def stored_schema(table: TableSchema, file_type: str, schema_id: int | None = None) -> pa.Schema:
    """The columns every data file of this type must hold (a change file may also
    hold ``_seq``, written by minor compaction), as version ``schema_id`` (default:
    the table's) wrote them."""
    if schema_id is not None:
        table = table.at_version(schema_id)
    if file_type == "B":
        return table.schema
    stored = change_schema(table, file_type)
    return stored.remove(stored.get_field_index(SEQ))


def read_inputs(
    storage: Storage,
    table: TableSchema,
    entries: Sequence[FileEntry],
    merged_seqs: Mapping[str, int],
    *,
    base_filter: pc.Expression | None = None,
    change_filter: pc.Expression | None = None,
) -> MergeInputs:
    """Base files whole; change files with seq > their partition's max_merged_seq.
    Raises ``StorageError`` naming the file when one does not match the catalog.

    ``table`` may be a projection of the table (``project``): only its columns are
    read. ``base_filter`` is pushed into the base files' scan (row groups whose
    statistics rule it out are skipped, then rows); ``change_filter`` into the
    change files'. Which filters are safe where is the caller's business
    (``firn.engine.splits``): a change row may only be dropped for its key. A file
    read through a filter is not counted against its record count."""
    base = [e for e in entries if e.store == "base"]
    changes = unmerged_changes(entries, merged_seqs)
    inserts = [e for e in changes if e.file_type == "I"]
    deletes = [e for e in changes if e.file_type == "D"]
    vectors = [e.deletion_vector for e in base if e.deletion_vector is not None]
    check_sizes(storage, [*base, *changes, *vectors])
    return MergeInputs(
        base=scan_base(storage, table, base, base_filter) if base else None,
        inserts=scan_changes(storage, table, inserts, "I", merged_seqs, change_filter),
        deletes=scan_changes(storage, table, deletes, "D", merged_seqs, change_filter),
    )


def unmerged_changes(
    entries: Sequence[FileEntry], merged_seqs: Mapping[str, int]
) -> list[FileEntry]:
    """The change files that may hold unmerged rows: a change file's seq is the
    greatest seq of its rows, so a file at or below its partition's max_merged_seq
    holds nothing unmerged."""
    return [
        e for e in entries if e.store == "change" and e.seq > merged_seqs.get(e.partition_key, 0)
    ]


def project(table: TableSchema, columns: Sequence[str]) -> TableSchema:
    """``table`` narrowed to ``columns`` (kept in table order; the key columns must
    be among them), for reading and merging fewer columns."""
    return table.narrowed(columns)


def by_version(entries: Sequence[FileEntry]) -> dict[int, list[FileEntry]]:
    """``entries`` grouped by the schema version they were written under."""
    groups: dict[int, list[FileEntry]] = {}
    for entry in entries:
        groups.setdefault(entry.schema_id, []).append(entry)
    return groups


def _dataset(storage: Storage, entries: Sequence[FileEntry], schema: pa.Schema) -> ds.Dataset:
    paths = [storage.full_path(e.path) for e in entries]
    return ds.dataset(paths, schema=schema, format="parquet", filesystem=storage.fs)


def _checked_batches(
    storage: Storage,
    table: TableSchema,
    entries: Sequence[FileEntry],
    schema: pa.Schema,
    row_filter: pc.Expression | None = None,
) -> Iterator[tuple[FileEntry, pa.RecordBatch]]:
    """Every batch of ``entries`` as ``schema`` columns, with the entry it came from;
    files of each schema version are one scan (see the module doc). Several versions'
    scans run side by side, each read whole: one scan alone leaves the cores idle
    while it starts and while its last files decode."""
    groups = sorted(by_version(entries).items())
    if len(groups) == 1:
        yield from _version_batches(storage, table, groups[0][0], groups[0][1], schema, row_filter)
        return
    with ThreadPoolExecutor(min(len(groups), VERSION_SCANS), "firn-scan") as pool:
        # Each generator runs, whole, on a pool thread (list drains it there).
        scans = [
            pool.submit(list, _version_batches(storage, table, v, g, schema, row_filter))
            for v, g in groups
        ]
        for scan in scans:
            yield from scan.result()


VERSION_SCANS = 4
"""Scans of files of different schema versions that run at once."""


def _version_batches(
    storage: Storage,
    table: TableSchema,
    schema_id: int,
    entries: Sequence[FileEntry],
    schema: pa.Schema,
    row_filter: pc.Expression | None,
) -> Iterator[tuple[FileEntry, pa.RecordBatch]]:
    """The batches of files of version ``schema_id``, as ``schema`` columns."""
    view = file_view(table.version_schema(schema_id), schema)
    if view.identity:
        yield from _scanned_batches(storage, table, entries, schema, row_filter)
        return
    for entry, batch in _scanned_batches(storage, table, entries, view.stored):
        batch = view.adapt(batch)
        yield entry, batch if row_filter is None else batch.filter(row_filter)


def _scanned_batches(
    storage: Storage,
    table: TableSchema,
    entries: Sequence[FileEntry],
    schema: pa.Schema,
    row_filter: pc.Expression | None = None,
) -> Iterator[tuple[FileEntry, pa.RecordBatch]]:
    """Every batch of ``entries`` (files of one version, read as ``schema``) with the
    entry it came from; then, when nothing was filtered, each file's rows counted
    against the catalog. Errors name the file (see the module doc)."""
    by_path = {storage.full_path(e.path): e for e in entries}
    rows = dict.fromkeys(by_path, 0)
    required = [f.name for f in schema if not f.nullable]
    try:
        scanner = _dataset(storage, entries, schema).scanner(filter=row_filter)
        for tagged in scanner.scan_batches():
            path = tagged.fragment.path
            batch = tagged.record_batch
            rows[path] += batch.num_rows
            nulls = [c for c in required if batch.column(c).null_count]
            if nulls:
                raise CorruptFileError(path, SCHEMA, f"has nulls (or lacks) {', '.join(nulls)}")
            yield by_path[path], batch
    except (OSError, pa.ArrowException) as exc:
        raise _culprit(storage, table, entries, exc) from exc
    if row_filter is not None:
        return
    for path, entry in by_path.items():
        if rows[path] != entry.record_count:
            raise CorruptFileError(
                path, RECORD_COUNT, f"{rows[path]} rows read, the catalog says {entry.record_count}"
            )


def _culprit(
    storage: Storage, table: TableSchema, entries: Sequence[FileEntry], exc: BaseException
) -> StorageError:
    """The scan of ``entries`` failed with ``exc``: find the file to blame by checking
    them one by one, each decoded whole."""
    for entry in entries:
        required = stored_schema(table, entry.file_type, entry.schema_id)
        problems = inspect_file(storage, entry, required, deep=True)
        if problems:
            path = storage.full_path(entry.path)
            if problems[0].kind == IO:
                return StorageError(f"cannot read {path}: {problems[0].detail}", retryable=True)
            return CorruptFileError(path, problems[0].kind, problems[0].detail)
    return StorageError(
        f"cannot read table files under {storage.root} (each reads fine now: a transient "
        f"I/O error?): {exc}",
        retryable=True,
    )


def scan_base(
    storage: Storage,
    table: TableSchema,
    entries: Sequence[FileEntry],
    row_filter: pc.Expression | None = None,
) -> pa.Table:
    """The live rows of base files: all their rows, but those their deletion vectors
    hide. Files without a vector are one dataset scan (``row_filter`` pushed into
    it); a file with one is read on its own (``_live_rows``: whole, or with a filter
    the row groups it may keep), its vector matched to its rows by their positions in
    the file (the only order they mean). The scan and the files with
    vectors are read at once: after a compaction most rows sit in files with vectors,
    and read one after another they left a core idle (2.1 s against 1.1 s for
    pyarrow reading the same 20M rows)."""
    plain = [e for e in entries if e.deletion_vector is None]
    vectored = [e for e in entries if e.deletion_vector is not None]

    def scanned() -> list[pa.Table]:
        if not plain:
            return []
        batches = _checked_batches(storage, table, plain, table.schema, row_filter)
        return [pa.Table.from_batches([b for _, b in batches], table.schema)]

    if not vectored:
        parts = scanned()
    else:
        with ThreadPoolExecutor(min(len(vectored) + 1, BASE_READS), "firn-base") as pool:
            scan = pool.submit(scanned)
            live = pool.map(lambda e: _live_rows(storage, table, e, row_filter), vectored)
            parts = [*scan.result(), *live]
    return pa.concat_tables(parts) if parts else table.schema.empty_table()


BASE_READS = 4
"""Base reads that run at once: the dataset scan and the files with vectors, each
also decoding its columns on pyarrow's own threads."""


def _live_rows(
    storage: Storage, table: TableSchema, entry: FileEntry, row_filter: pc.Expression | None
) -> pa.Table:
    """The rows of a base file with a deletion vector that the vector leaves, as the
    table's columns, ``row_filter`` applied. With a filter, only the row groups their
    statistics say it may keep are read (a key's lookup reads one of a file's row
    groups, not the file), when the file stores the read's columns as they are: a
    file of another schema version is read whole and filtered after its projection,
    as the scan of such files is."""
    assert entry.deletion_vector is not None
    hidden = read_positions(storage, entry.deletion_vector, entry.record_count)
    required = stored_schema(table, entry.file_type, entry.schema_id)
    view = file_view(table.version_schema(entry.schema_id), table.schema)
    names = stored_names(view, table.schema.names)
    if row_filter is not None and view.identity:
        rows, spans = read_matching(storage, entry, names, row_filter, required)
        _refuse_missing(storage, entry, view, rows)
        return live_matching(rows, hidden, spans, row_filter).select(table.schema.names)
    rows = read_whole(storage, entry, names, required)
    _refuse_missing(storage, entry, view, rows)
    rows = view.adapt(live_rows(rows, hidden))
    if row_filter is not None:
        rows = rows.filter(row_filter)
    return rows.select(table.schema.names)


def _refuse_missing(storage: Storage, entry: FileEntry, view: FileView, rows: pa.Table) -> None:
    """A base file's required columns hold no nulls: one that does (or lacks the
    column) is damaged, and naming it beats handing its nulls to a reader."""
    nulls = [f.name for f in view.stored if not f.nullable and rows.column(f.name).null_count]
    if nulls:
        path = storage.full_path(entry.path)
        raise CorruptFileError(path, SCHEMA, f"has nulls (or lacks) {', '.join(nulls)}")


def scan_changes(
    storage: Storage,
    table: TableSchema,
    entries: Sequence[FileEntry],
    file_type: str,
    merged_seqs: Mapping[str, int],
    row_filter: pc.Expression | None = None,
) -> pa.Table:
    """The rows of change files of one type with seq above their partition's
    ``merged_seqs`` entry, each with its ``_seq`` (the row's own, else its file's)."""
    target = change_schema(table, file_type)
    if not entries:
        return target.empty_table()
    # _seq is nullable in the scan: files written by producers do not have it.
    scan_schema = target.set(target.get_field_index(SEQ), pa.field(SEQ, pa.int64(), True))
    batches = []
    for entry, batch in _checked_batches(storage, table, entries, scan_schema, row_filter):
        seqs = batch.column(SEQ)
        if seqs.null_count == len(seqs):
            seqs = pa.array(np.full(len(batch), entry.seq, dtype=np.int64))
        else:
            seqs = pc.fill_null(seqs, entry.seq)
        batch = batch.set_column(batch.schema.get_field_index(SEQ), SEQ, seqs)
        floor = merged_seqs.get(entry.partition_key, 0)
        if len(seqs) and pc.min(seqs).as_py() <= floor:
            batch = batch.filter(pc.greater(seqs, floor))
        batches.append(batch)
    return pa.Table.from_batches(batches, scan_schema).cast(target)
