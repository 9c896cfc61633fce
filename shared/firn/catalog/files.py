"""What a snapshot contains: its live files and each partition's max_merged_seq.

Catalog rows are append-only except ``removed_snapshot``, which a later snapshot
sets to its own id. So "the files of snapshot S" (added <= S, not removed by S) and
"max_merged_seq as of S" (the last history row at or before S) never change once S
is visible, and a reader pinned at S needs no long transaction while commits land.
Snapshot ids are allocated under the table row's lock, so they become visible in
order: no reader sees S + 1 before S. Retention (``expiry.py``) deletes only rows no
kept snapshot can see, after marking the older snapshots expired.
"""

from __future__ import annotations

from typing import Any

from firn.errors import ConfigError, SnapshotExpiredError
from firn.model.files import DeletionVector, FileEntry
from firn.model.tree import Node
from firn.postgres.connection import Connection

_FILE_COLUMNS = (
    "file_id, partition_key, store, file_type, node_m, node_i, seq, path, "
    "size_bytes, record_count, min_key, max_key, added_snapshot, dv_path, dv_size_bytes, dv_rows, "
    "key_spans, schema_id"
)


def _entry(row: tuple[Any, ...]) -> FileEntry:
    fid, part, store, ftype, m, i, seq, path, size, records, lo, hi, added, *vector_columns = row
    dv, dv_size, hidden, spans, schema_id = vector_columns
    vector = None if dv is None else DeletionVector(dv, int(dv_size), int(hidden))
    return FileEntry(
        fid,
        part,
        store,
        ftype,
        Node(m, i),
        seq,
        path,
        size,
        records,
        lo,
        hi,
        added,
        vector,
        spans,
        int(schema_id),
    )


def partitions_of(conn: Connection, table_id: int) -> list[str]:
    """The keys of every partition the table has had, in order."""
    rows = conn.execute(
        "SELECT partition_key FROM catalog_partition WHERE table_id = %s ORDER BY partition_key",
        (table_id,),
    ).fetchall()
    return [key for (key,) in rows]


def current_snapshot(conn: Connection, table_id: int) -> int:
    row = conn.execute(
        "SELECT last_snapshot FROM catalog_table WHERE table_id = %s", (table_id,)
    ).fetchone()
    if row is None:
        raise ConfigError(f"table {table_id} no longer exists")
    return int(row[0])


def check_snapshot(conn: Connection, table_id: int, snapshot_id: int) -> None:
    """``ConfigError`` unless ``snapshot_id`` is one of the table's snapshots (0 = empty)
    and has not expired (``SnapshotExpiredError``: its files may be deleted)."""
    if snapshot_id == 0:
        return
    row = conn.execute(
        "SELECT s.snapshot_id IS NOT NULL, s.expired_at, t.last_snapshot FROM catalog_table t "
        "LEFT JOIN snapshot s ON s.table_id = t.table_id AND s.snapshot_id = %s "
        "WHERE t.table_id = %s",
        (snapshot_id, table_id),
    ).fetchone()
    if row is None:
        raise ConfigError(f"table {table_id} no longer exists")
    found, expired_at, last = row
    if not found and not 0 < snapshot_id <= last:
        raise ConfigError(f"table {table_id} has no snapshot {snapshot_id}")
    if not found or expired_at is not None:
        # A snapshot id the table allocated but no longer has was pruned by retention
        # after it expired (firn.catalog.pruning).
        when = "" if expired_at is None else f" at {expired_at.isoformat()}"
        raise SnapshotExpiredError(
            f"snapshot {snapshot_id} of table {table_id} expired{when} "
            "(older than snapshot.retention); read a newer snapshot"
        )


def files_at(conn: Connection, table_id: int, snapshot_id: int) -> list[FileEntry]:
    """The live files of the table as of ``snapshot_id``."""
    rows = conn.execute(
        f"SELECT {_FILE_COLUMNS} FROM data_file WHERE table_id = %s AND added_snapshot <= %s "
        "AND (removed_snapshot IS NULL OR removed_snapshot > %s) ORDER BY file_id",
        (table_id, snapshot_id, snapshot_id),
    ).fetchall()
    return [_entry(r) for r in rows]


def committed_changes(
    conn: Connection, table_id: int, after_snapshot: int, upto_snapshot: int
) -> list[FileEntry]:
    """The change files producer commits added in snapshots (after, upto], live or
    since folded away; compaction snapshots add none (their outputs hold rows
    committed earlier)."""
    rows = conn.execute(
        f"SELECT {', '.join('d.' + c for c in _FILE_COLUMNS.split(', '))} FROM data_file d "
        "JOIN snapshot s ON s.table_id = d.table_id AND s.snapshot_id = d.added_snapshot "
        "WHERE d.table_id = %s AND d.added_snapshot > %s AND d.added_snapshot <= %s "
        "AND d.store = 'change' AND s.kind = 'commit' ORDER BY d.file_id",
        (table_id, after_snapshot, upto_snapshot),
    ).fetchall()
    return [_entry(r) for r in rows]


def merged_seqs_at(conn: Connection, table_id: int, snapshot_id: int) -> dict[str, int]:
    """Each partition's max_merged_seq as of ``snapshot_id`` (absent means 0)."""
    rows = conn.execute(
        "SELECT DISTINCT ON (partition_key) partition_key, max_merged_seq "
        "FROM partition_merge_history WHERE table_id = %s AND snapshot_id <= %s "
        "ORDER BY partition_key, snapshot_id DESC",
        (table_id, snapshot_id),
    ).fetchall()
    return {part: int(seq) for part, seq in rows}


def partition_files_at(
    conn: Connection, table_id: int, snapshot_id: int, partition_key: str
) -> list[FileEntry]:
    """The live files of one partition as of ``snapshot_id``."""
    rows = conn.execute(
        f"SELECT {_FILE_COLUMNS} FROM data_file WHERE table_id = %s AND partition_key = %s "
        "AND added_snapshot <= %s AND (removed_snapshot IS NULL OR removed_snapshot > %s) "
        "ORDER BY file_id",
        (table_id, partition_key, snapshot_id, snapshot_id),
    ).fetchall()
    return [_entry(r) for r in rows]
