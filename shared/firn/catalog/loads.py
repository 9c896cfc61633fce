"""Registering a bulk load: ONE transaction replaces whole partitions with base files.

A load is a commit, not a compaction: it allocates a seq ``L`` and a snapshot as a
producer commit does (under the table row's lock, so loads and commits land in
seq order), then, for every partition it replaces,

- marks every live file removed by this snapshot (base and change alike),
- sets ``max_merged_seq = L`` (and ``max_seq = L``) with its history row, so no
  change row committed before the load is ever merged back, by a reader or by a
  compaction; change files committed after it (seq > L) apply on top as usual,
- registers the load's base files with seq ``L``.

A compaction plan open on a replaced partition cannot commit over the load:
``firn.catalog.compactions`` checks that ``max_merged_seq`` is still the one the
plan started from and that its inputs are still live, and both changed, so the
plan fails validation and its outputs become orphans (nothing of the load is lost).

Staging: the load's files are written under one directory recorded in
``orphan_file`` before the first byte (a path ending in ``/``, which expiry deletes
whole after ``orphan.retention`` unless a data file lies under it). This
transaction deletes that record, with the same fence as producer commits: if orphan
cleanup already claimed it, the load fails instead of registering files that are
being deleted (``firn.catalog.commits``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from firn.catalog.commits import next_seq, unstage_dir
from firn.errors import ConfigError
from firn.model.commits import CommitResult, StagedFile
from firn.postgres.connection import Connection


def register_load(
    conn: Connection,
    table_id: int,
    files: Sequence[StagedFile],
    staged_dir: str,
    partitions: Mapping[str, Mapping[str, str]] | None,
) -> CommitResult:
    """Replace ``partitions`` (key -> column values; ``None``: every partition of the
    table) with ``files``, all under ``staged_dir``; call inside a transaction."""
    seq, snapshot_id, now = next_seq(conn, table_id)
    unstage_dir(conn, table_id, staged_dir, files)
    existing = {
        key: values
        for key, values in conn.execute(
            "SELECT partition_key, partition_values FROM catalog_partition WHERE table_id = %s "
            "ORDER BY partition_key FOR UPDATE",
            (table_id,),
        ).fetchall()
    }
    loaded = {f.partition_key: f.partition_values for f in files}
    replaced = dict(existing) if partitions is None else {}
    if partitions is not None:
        replaced.update({k: v for k, v in partitions.items() if k in existing})
    replaced.update(loaded)
    outside = [] if partitions is None else sorted(set(loaded) - set(partitions))
    if outside:
        raise ConfigError(f"the load holds rows of partitions it does not replace: {outside}")
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO catalog_partition (table_id, partition_key, partition_values, max_seq, "
            "max_merged_seq, last_major_at) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (table_id, partition_key) DO UPDATE SET max_seq = EXCLUDED.max_seq, "
            "max_merged_seq = EXCLUDED.max_merged_seq, last_major_at = EXCLUDED.last_major_at",
            [
                (table_id, key, json.dumps(dict(values)), seq, seq, now)
                for key, values in sorted(replaced.items())
            ],
        )
        removed = cur.execute(
            "UPDATE data_file SET removed_snapshot = %s WHERE table_id = %s "
            "AND partition_key = ANY(%s) AND removed_snapshot IS NULL",
            (snapshot_id, table_id, sorted(replaced)),
        ).rowcount
        cur.executemany(
            "INSERT INTO partition_merge_history (table_id, partition_key, snapshot_id, "
            "max_merged_seq) VALUES (%s, %s, %s, %s)",
            [(table_id, key, snapshot_id, seq) for key in sorted(replaced)],
        )
        summary = {
            "partitions": sorted(replaced),
            "base_files": len(files),
            "rows": sum(f.record_count for f in files),
            "bytes": sum(f.size_bytes for f in files),
            "removed_files": removed,
        }
        cur.execute(
            "INSERT INTO snapshot (table_id, snapshot_id, kind, seq, created_at, summary) "
            "VALUES (%s, %s, 'load', %s, %s, %s)",
            (table_id, snapshot_id, seq, now, json.dumps(summary)),
        )
        cur.executemany(
            "INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, "
            "seq, path, size_bytes, record_count, min_key, max_key, added_snapshot, schema_id) "
            "VALUES (%s, %s, 'base', 'B', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    table_id,
                    f.partition_key,
                    f.node.m,
                    f.node.i,
                    seq,
                    f.path,
                    f.size_bytes,
                    f.record_count,
                    None if f.min_key is None else json.dumps(f.min_key),
                    None if f.max_key is None else json.dumps(f.max_key),
                    snapshot_id,
                    f.schema_id,
                )
                for f in files
            ],
        )
    return CommitResult(int(seq), int(snapshot_id), now)
