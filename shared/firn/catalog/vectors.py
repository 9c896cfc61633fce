"""Giving base files new deletion vectors in a snapshot (``firn.io.deletion_vectors``).

A data file's catalog row never changes but to record the snapshot that removed it,
so a base file whose vector changes gets a new row: the old one is removed as of the
snapshot, and a copy naming the new vector is added by it (same path, a new
``file_id``). A reader pinned at an older snapshot keeps the old vector; at most one
row per path is live (``data_file_live_path``). Runs inside the caller's commit
transaction, which allocated ``snapshot_id`` and holds the table's lock.
"""

from __future__ import annotations

from collections.abc import Mapping

from firn.errors import CommitError
from firn.model.files import DeletionVector
from firn.postgres.connection import Connection


def replace_vectors(
    conn: Connection, table_id: int, snapshot_id: int, vectors: Mapping[int, DeletionVector]
) -> dict[int, int]:
    """Give each live base file (by ``file_id``) its new vector as of ``snapshot_id``;
    returns old ``file_id`` -> new ``file_id``. A file that is not a live base file of
    the table, or a vector hiding more rows than the file has, raises ``CommitError``
    (the caller's transaction then rolls back whole)."""
    if not vectors:
        return {}
    ids = sorted(vectors)
    removed = conn.execute(
        "UPDATE data_file SET removed_snapshot = %s WHERE table_id = %s AND file_id = ANY(%s) "
        "AND store = 'base' AND removed_snapshot IS NULL RETURNING file_id, record_count",
        (snapshot_id, table_id, ids),
    ).fetchall()
    counts = {int(fid): int(records) for fid, records in removed}
    missing = [fid for fid in ids if fid not in counts]
    if missing:
        raise CommitError(f"files {missing} are not live base files of table {table_id}")
    too_many = [fid for fid in ids if vectors[fid].rows > counts[fid]]
    if too_many:
        raise CommitError(f"deletion vectors hide more rows than files {too_many} hold")
    replaced: dict[int, int] = {}
    for fid in ids:
        vector = vectors[fid]
        row = conn.execute(
            "INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, "
            "seq, path, size_bytes, record_count, min_key, max_key, added_snapshot, dv_path, "
            "dv_size_bytes, dv_rows, schema_id) SELECT table_id, partition_key, store, file_type, "
            "node_m, node_i, seq, path, size_bytes, record_count, min_key, max_key, %s, %s, %s, "
            "%s, schema_id "
            "FROM data_file WHERE file_id = %s RETURNING file_id",
            (snapshot_id, vector.path, vector.size_bytes, vector.rows, fid),
        ).fetchone()
        assert row is not None  # the row was just updated in this transaction
        replaced[fid] = int(row[0])
    return replaced
