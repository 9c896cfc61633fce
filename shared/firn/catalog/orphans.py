"""The storage-listing orphan sweep: files under a table's location that the catalog
does not know, older than ``orphan.retention``, are deleted (as Iceberg's
``remove_orphan_files`` with ``older_than``).

Recorded orphans (``orphan_file``, written by ``record_orphans``) cover what Firn
knows it left behind. The sweep covers what nobody could record: files of an executor
killed mid-write, of a producer that died before its records were written by an older
version, of a delete that failed. It lists storage one directory at a time and checks
the files in batches, so a table with millions of files is never held in memory.

A listed file is kept when the catalog knows it, checked after the batch was listed:

- a data file or a base file's deletion vector, live or removed but not yet expired
  (``data_file``);
- a recorded path (``orphan_file``): a producer's staged file, whose record exists
  before the file does and is replaced by its ``data_file`` row in the commit's own
  transaction, or an orphan that expiry deletes after the retention on its own;
- a file in the directory of a running or prepared attempt of an open plan: a file
  listed was written after its task was claimed, so the claim is visible by then,
  and the plan commit that registers the outputs is atomic with leaving that state
  (``_unknown`` says why two statements suffice).

Files under ``_iceberg/`` belong to the Iceberg publisher (``firn.iceberg``), which
deletes its own once no retained published snapshot uses them: the sweep leaves them.

So the catalog alone protects every file that may still be committed; the age
threshold (modification time before now minus ``orphan.retention``, on the
database's clock) is a second guard, and it keeps fresh files around for people
looking at a failure.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from firn.io.storage import Storage, StoredFile
from firn.model.states import PlanState, TaskState
from firn.model.tasks import attempt_dir
from firn.postgres.connection import Connection

log = logging.getLogger(__name__)

CHECK_BATCH = 1000
"""Listed files checked against the catalog in one query."""
PROGRESS_EVERY = 10_000
"""Listed files between two progress reports."""

_OPEN_PLANS = [s.value for s in (PlanState.PLANNED, PlanState.EXECUTING, PlanState.COMMITTING)]
_WRITING_TASKS = [s.value for s in (TaskState.EXECUTING, TaskState.PREPARED)]


def record_orphans(conn: Connection, table_id: int, paths: Sequence[str], reason: str) -> None:
    """Files no snapshot references; deleted after ``orphan.retention``."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO orphan_file (table_id, path, reason) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            [(table_id, p, reason) for p in paths],
        )


@dataclass(frozen=True)
class SweepProgress:
    """How far a sweep of one table has come."""

    table: str
    listed: int
    """Files listed so far."""
    unreferenced: int
    """Of them, files the catalog does not know and older than the retention."""
    done: bool


Progress = Callable[[SweepProgress], None]


@dataclass(frozen=True)
class SweepResult:
    """What a sweep of one table found (and, unless a dry run, deleted)."""

    listed: int
    unreferenced: tuple[str, ...]
    """Paths relative to the table's location."""
    bytes: int


def sweep_storage(
    conn: Connection,
    table_id: int,
    name: str,
    storage: Storage,
    cutoff: dt.datetime,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> SweepResult:
    """List ``storage`` and delete files the catalog does not know, modified before
    ``cutoff``; with ``dry_run``, only report them."""
    listed, found, size = 0, [], 0
    for batch in _batches(_firn_files(storage), CHECK_BATCH):
        old = [f for f in batch if f.modified is not None and f.modified < cutoff]
        unknown = _unknown(conn, table_id, old) if old else []
        if not dry_run:
            for f in unknown:
                storage.delete(f.path)
        found += [f.path for f in unknown]
        size += sum(f.size for f in unknown)
        before, listed = listed, listed + len(batch)
        if listed // PROGRESS_EVERY > before // PROGRESS_EVERY:
            _report(progress, SweepProgress(name, listed, len(found), done=False))
    _report(progress, SweepProgress(name, listed, len(found), done=True))
    return SweepResult(listed, tuple(found), size)


PUBLISHED_DIR = "_iceberg"
"""The Iceberg publisher's directory under a table's location (``firn.iceberg.writing``)."""


def _firn_files(storage: Storage) -> Iterator[StoredFile]:
    for stored in storage.walk():
        if not (stored.path == PUBLISHED_DIR or stored.path.startswith(PUBLISHED_DIR + "/")):
            yield stored


def _report(progress: Progress | None, state: SweepProgress) -> None:
    log.info(
        "%s: orphan sweep %s %d file(s), %d unreferenced",
        state.table,
        "listed" if state.done else "has listed",
        state.listed,
        state.unreferenced,
    )
    if progress is not None:
        progress(state)


def _batches(files: Iterable[StoredFile], size: int) -> Iterator[list[StoredFile]]:
    it = iter(files)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _unknown(conn: Connection, table_id: int, files: Sequence[StoredFile]) -> list[StoredFile]:
    """``files`` the catalog does not know.

    Two statements, in this order: a task's states only move towards its outputs
    being registered (Executing, Prepared, then Committed with ``data_file`` rows in
    the same transaction) or towards never being (a stale, failed or replaced
    attempt), so a file whose attempt is not writing in the first snapshot is either
    registered in the second, later one or never will be."""
    writing = {
        attempt_dir(prefix, int(attempt))
        for prefix, attempt in conn.execute(
            "SELECT t.spec->>'output_prefix', t.attempt FROM compaction_task t "
            "JOIN compaction_plan p USING (plan_id) WHERE p.table_id = %s "
            "AND p.state = ANY(%s) AND t.state = ANY(%s)",
            (table_id, _OPEN_PLANS, _WRITING_TASKS),
        ).fetchall()
    }
    candidates = [f.path for f in files if not _under(f.path, writing)]
    unknown = {
        path
        for (path,) in conn.execute(
            "SELECT p FROM unnest(%s::text[]) AS p WHERE "
            "NOT EXISTS (SELECT 1 FROM data_file d WHERE d.path = p) "
            "AND NOT EXISTS (SELECT 1 FROM data_file d WHERE d.dv_path = p) "
            "AND NOT EXISTS (SELECT 1 FROM orphan_file o WHERE o.table_id = %s AND o.path = p)",
            (candidates, table_id),
        ).fetchall()
    }
    return [f for f in files if f.path in unknown]


def _under(path: str, directories: set[str]) -> bool:
    parent = posixpath.dirname(path)
    while parent:
        if parent in directories:
            return True
        parent = posixpath.dirname(parent)
    return False
