"""Registering a producer commit: ONE transaction allocates the seq and the snapshot,
records the partitions, the snapshot and every staged file (design §3).

Staged files never leak, whatever happens to the producer. Their paths are recorded
in ``orphan_file`` (``stage_paths``) before the first byte is written, and the commit
transaction deletes those rows as it registers the files. So after any outcome (a
rollback, a crash, a connection lost during COMMIT) the rows still there are exactly
the staged files no commit references: the commit landed iff its rows are gone. A
leftover row is an orphan, deleted with its file after ``orphan.retention``
(``firn.catalog.expiry``), which needs no one to find out later what happened.

The rows are also a fence against a producer slower than ``orphan.retention``:
expiry claims a row (``deleted_at``) before deleting its file, and the commit deletes
only unclaimed rows, so if any of its files was claimed the commit fails and rolls
back instead of registering a file that is being deleted.

The ``UPDATE ... RETURNING`` on the table row takes its row lock, so commits to one
table serialise here: seqs are allocated in commit order and, because a rolled-back
transaction also rolls back its increment, without gaps. Commits to different tables
never wait for each other.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from firn.errors import CommitError, ConfigError
from firn.model.commits import CommitResult, StagedFile, StreamBatch
from firn.postgres.connection import Connection

STAGED = "staged by a producer commit"
"""The ``orphan_file`` reason of a staged path whose commit has not (yet) landed."""


def stage_paths(
    conn: Connection, table_id: int, paths: Sequence[str], *, refresh: bool = False
) -> None:
    """Record ``paths`` before they are written (commits its own transaction).
    ``refresh``: a path recorded already (a stream's directory, staged again by each
    of its writers) is made new again, unless orphan cleanup claimed it."""
    with conn.transaction():
        if not refresh:
            conn.execute(
                "INSERT INTO orphan_file (table_id, path, reason) "
                "SELECT %s, unnest(%s::text[]), %s",
                (table_id, list(paths), STAGED),
            )
            return
        staged = conn.execute(
            "INSERT INTO orphan_file (table_id, path, reason) SELECT %s, unnest(%s::text[]), %s "
            "ON CONFLICT (table_id, path) DO UPDATE SET recorded_at = now() "
            "WHERE orphan_file.deleted_at IS NULL",
            (table_id, list(paths), STAGED),
        ).rowcount
        if staged != len(paths):
            raise CommitError(
                "orphan cleanup is deleting a staged directory of this stream (it saw no "
                "commit for longer than orphan.retention); start the query again",
                retryable=True,
            )


def unstage_paths(conn: Connection, table_id: int, paths: Sequence[str]) -> None:
    """Forget staged paths whose files were deleted after a known failure."""
    with conn.transaction():
        conn.execute(
            "DELETE FROM orphan_file WHERE table_id = %s AND path = ANY(%s) AND deleted_at IS NULL",
            (table_id, list(paths)),
        )


def unstage_dir(
    conn: Connection,
    table_id: int,
    staged_dir: str,
    files: Sequence[StagedFile],
    *,
    keep: bool = False,
) -> None:
    """Clear the record of a staged directory (a path ending in ``/``) as its files
    are registered, with the fence ``unstage`` keeps for staged files. ``keep``: a
    stream's directory stays staged for its next batches; its record is made new
    again, so orphan cleanup never takes the directory of a running stream."""
    if not staged_dir.endswith("/"):
        raise ConfigError(f"a staged directory ends in '/', got {staged_dir!r}")
    stray = [f.path for f in files if not f.path.startswith(staged_dir)]
    if stray:
        raise ConfigError(f"files outside the staged directory {staged_dir!r}: {stray[:3]}")
    statement = "UPDATE orphan_file SET recorded_at = now()" if keep else "DELETE FROM orphan_file"
    unstaged = conn.execute(
        f"{statement} WHERE table_id = %s AND path = %s AND deleted_at IS NULL",
        (table_id, staged_dir),
    ).rowcount
    if unstaged != 1:
        raise CommitError(
            f"the staged directory {staged_dir!r} is no longer staged: the write took longer "
            "than orphan.retention and orphan cleanup claimed it, or it was committed already",
            retryable=False,
        )


def next_seq(conn: Connection, table_id: int) -> tuple[int, int, dt.datetime]:
    """The table's next seq and snapshot id, taken under the table row's lock (so
    commits become visible in seq order), and the transaction's time."""
    row = conn.execute(
        "UPDATE catalog_table SET last_seq = last_seq + 1, last_snapshot = last_snapshot + 1 "
        "WHERE table_id = %s RETURNING last_seq, last_snapshot, now()",
        (table_id,),
    ).fetchone()
    if row is None:
        raise ConfigError(f"table {table_id} no longer exists")
    return int(row[0]), int(row[1]), row[2]


def register_commit(
    conn: Connection,
    table_id: int,
    files: Sequence[StagedFile],
    *,
    staged_dir: str | None = None,
    stream: StreamBatch | None = None,
) -> CommitResult:
    """Allocate seq and snapshot and register ``files`` (staged by ``stage_paths``,
    each by its path or all under ``staged_dir``); call inside a transaction. With
    ``stream``, the micro-batch is recorded too (a second commit of it fails here)
    and ``staged_dir``, the stream's, stays staged for its next batches."""
    seq, snapshot_id, now = next_seq(conn, table_id)
    if staged_dir is not None:
        unstage_dir(conn, table_id, staged_dir, files, keep=stream is not None)
    else:
        _unstage_files(conn, table_id, files)
    if stream is not None:
        conn.execute(
            "INSERT INTO stream_batch (table_id, query_id, batch_id, seq, snapshot_id) "
            "VALUES (%s, %s, %s, %s, %s)",
            (table_id, stream.query_id, stream.batch_id, seq, snapshot_id),
        )
    partitions = {f.partition_key: f.partition_values for f in files}
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO catalog_partition (table_id, partition_key, partition_values, max_seq) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (table_id, partition_key) "
            "DO UPDATE SET max_seq = EXCLUDED.max_seq",
            [(table_id, key, json.dumps(vals), seq) for key, vals in sorted(partitions.items())],
        )
        cur.execute(
            "INSERT INTO snapshot (table_id, snapshot_id, kind, seq, created_at, summary) "
            "VALUES (%s, %s, 'commit', %s, %s, %s)",
            (table_id, snapshot_id, seq, now, json.dumps(_summary(files))),
        )
        cur.executemany(
            "INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, "
            "seq, path, size_bytes, record_count, min_key, max_key, added_snapshot, key_spans, "
            "schema_id) VALUES (%s, %s, 'change', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    table_id,
                    f.partition_key,
                    f.file_type,
                    f.node.m,
                    f.node.i,
                    seq,
                    f.path,
                    f.size_bytes,
                    f.record_count,
                    _json_or_null(f.min_key),
                    _json_or_null(f.max_key),
                    snapshot_id,
                    _json_or_null(f.key_spans),
                    f.schema_id,
                )
                for f in files
            ],
        )
    return CommitResult(int(seq), int(snapshot_id), now)


def _unstage_files(conn: Connection, table_id: int, files: Sequence[StagedFile]) -> None:
    unstaged = conn.execute(
        "DELETE FROM orphan_file WHERE table_id = %s AND path = ANY(%s) AND deleted_at IS NULL",
        (table_id, [f.path for f in files]),
    ).rowcount
    if unstaged != len(files):
        raise CommitError(
            f"{len(files) - unstaged} of {len(files)} staged files are no longer staged: "
            "the commit took longer than orphan.retention and orphan cleanup claimed them",
            retryable=True,
        )


def stream_batch_seq(conn: Connection, table_id: int, batch: StreamBatch) -> int | None:
    """The seq a micro-batch was committed as (0 when it was empty), or None."""
    row = conn.execute(
        "SELECT coalesce(seq, 0) FROM stream_batch WHERE table_id = %s AND query_id = %s "
        "AND batch_id = %s",
        (table_id, batch.query_id, batch.batch_id),
    ).fetchone()
    return None if row is None else int(row[0])


def record_empty_batch(conn: Connection, table_id: int, batch: StreamBatch) -> None:
    """A micro-batch with no rows: nothing to commit, but it counts as done."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO stream_batch (table_id, query_id, batch_id) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (table_id, batch.query_id, batch.batch_id),
        )


def _json_or_null(value: object) -> str | None:
    return None if value is None else json.dumps(value)


def _summary(files: Sequence[StagedFile]) -> dict[str, int]:
    return {
        "partitions": len({f.partition_key for f in files}),
        "insert_files": sum(f.file_type == "I" for f in files),
        "delete_files": sum(f.file_type == "D" for f in files),
        "inserted_rows": sum(f.record_count for f in files if f.file_type == "I"),
        "deleted_rows": sum(f.record_count for f in files if f.file_type == "D"),
        "bytes": sum(f.size_bytes for f in files),
    }
