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

import contextlib
import datetime as dt
import json
from collections.abc import Sequence

import psycopg

from firn.errors import CommitError, ConfigError, FirnError
from firn.model.commits import CommitResult, StagedFile, StreamBatch
from firn.model.tree import Node
from firn.postgres.connection import Connection

STAGED = "staged by a producer commit"
"""The ``orphan_file`` reason of a staged path whose commit has not (yet) landed."""


def stage_paths(
    conn: Connection, table_id: int, paths: Sequence[str], *, refresh: bool = False
) -> None:
    """Record ``paths`` before they are written (commits its own transaction).
    ``refresh``: a path recorded already (a stream's directory, staged again by each
    of its writers) is made new again, unless orphan cleanup claimed it. The catalog
    function refuses a role that may not commit to the table."""
    # One statement: on an autocommit connection it is its own transaction.
    with contextlib.nullcontext() if conn.autocommit else conn.transaction():
        row = conn.execute(
            "SELECT firn_stage_paths(%s, %s::text[], %s, %s)",
            (table_id, list(paths), STAGED, refresh),
        ).fetchone()
    if refresh and (row is None or row[0] != len(paths)):
        raise CommitError(
            "orphan cleanup is deleting a staged directory of this stream (it saw no "
            "commit for longer than orphan.retention); start the query again",
            retryable=True,
        )


def stage_commit(conn: Connection, table_id: int, paths: Sequence[str]) -> int:
    """Record a producer commit's ``paths`` before they are written, as ``stage_paths``
    does, and return the table's current schema version (what the change set must
    have been checked against): one round trip for both (migration 0021)."""
    with contextlib.nullcontext() if conn.autocommit else conn.transaction():
        try:
            row = conn.execute(
                "SELECT firn_stage_commit(%s, %s::text[], %s)", (table_id, list(paths), STAGED)
            ).fetchone()
        except psycopg.Error as exc:
            refusal = _commit_refusal(exc, table_id)
            if refusal is None:
                raise
            raise refusal from exc
    assert row is not None  # the function returns one row or raises
    return int(row[0])


def unstage_paths(conn: Connection, table_id: int, paths: Sequence[str]) -> None:
    """Forget staged paths whose files were deleted after a known failure."""
    with conn.transaction():
        conn.execute("SELECT firn_unstage_paths(%s, %s::text[])", (table_id, list(paths)))


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
    busiest: bool = False,
) -> CommitResult:
    """Allocate seq and snapshot and register ``files`` (staged by ``stage_paths``,
    each by its path or all under ``staged_dir``). With ``stream``, the micro-batch is
    recorded too (a second commit of it fails here) and ``staged_dir``, the stream's,
    stays staged for its next batches. ``busiest``: the result also holds each
    written partition's busiest change node (``busiest_nodes``), for back-pressure.

    The work is one statement, a call of the catalog's ``firn_register_commit``
    (migrations 0018 and 0021), which runs as the catalog's owner: a producer's role
    may commit only through it, only to the tables it was granted. On an autocommit
    connection the statement is its own transaction: no BEGIN and COMMIT round trips."""
    if staged_dir is not None:
        if not staged_dir.endswith("/"):
            raise ConfigError(f"a staged directory ends in '/', got {staged_dir!r}")
        stray = [f.path for f in files if not f.path.startswith(staged_dir)]
        if stray:
            raise ConfigError(f"files outside the staged directory {staged_dir!r}: {stray[:3]}")
    try:
        row = conn.execute(
            "SELECT * FROM firn_register_commit(%s, %s::jsonb, %s, %s, %s, %s)",
            (
                table_id,
                json.dumps([_file_row(f) for f in files]),
                staged_dir,
                None if stream is None else stream.query_id,
                None if stream is None else stream.batch_id,
                busiest,
            ),
        ).fetchone()
    except psycopg.Error as exc:
        refusal = _commit_refusal(exc, table_id)
        if refusal is None:
            raise
        raise refusal from exc
    assert row is not None  # the function returns one row or raises
    runs = (
        None
        if row[3] is None
        else {key: (str(Node(int(m), int(i))), int(n)) for key, (m, i, n) in row[3].items()}
    )
    return CommitResult(int(row[0]), int(row[1]), row[2], runs)


def _file_row(f: StagedFile) -> dict[str, object]:
    """A staged file as the JSON object ``firn_register_commit`` reads; an absent key
    is a NULL column."""
    row: dict[str, object] = {
        "partition_key": f.partition_key,
        "partition_values": f.partition_values,
        "file_type": f.file_type,
        "node_m": f.node.m,
        "node_i": f.node.i,
        "path": f.path,
        "size_bytes": f.size_bytes,
        "record_count": f.record_count,
        "schema_id": f.schema_id,
    }
    for name in ("min_key", "max_key", "key_spans"):
        value = getattr(f, name)
        if value is not None:
            row[name] = value
    return row


def _commit_refusal(exc: psycopg.Error, table_id: int) -> FirnError | None:
    """The Firn error for a refusal of ``firn_register_commit`` with a SQLSTATE of
    its own; None for any other (the caller's transaction handling sorts it)."""
    message = exc.diag.message_primary or str(exc)
    if exc.sqlstate == "FN404":
        return ConfigError(f"table {table_id} no longer exists")
    if exc.sqlstate == "FN409":
        return CommitError(message, retryable=True)
    if exc.sqlstate == "FN410":
        return CommitError(message, retryable=False)
    return None


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
            "SELECT firn_record_empty_batch(%s, %s, %s)",
            (table_id, batch.query_id, batch.batch_id),
        )
