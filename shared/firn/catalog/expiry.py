"""Retention (design §7): expire old snapshots, delete the files only they could read, and
delete orphan files.

Which snapshots stay readable: the current one, and every snapshot from ``keep_from``
on, the oldest one created within ``snapshot.retention`` or shown by a retained
published Iceberg snapshot (``iceberg_snapshot``: an Iceberg reader holding that
snapshot reads Firn's files in place). Snapshot ids, not creation
times, decide what is kept after ``keep_from``, so a snapshot whose transaction began
early but committed late is kept too. A data file is readable at snapshot ``s`` iff
``added_snapshot <= s < removed_snapshot`` (``files.files_at``), so a file removed by
snapshot ``R <= keep_from`` is readable by no kept snapshot; it expires once ``R`` is
itself older than the retention (both conditions of design §7).

The steps run in an order that a crash at any point leaves for a rerun to finish:

1. mark the snapshots before ``keep_from`` expired, so reading one fails with
   ``SnapshotExpiredError`` instead of a missing file;
2. delete the expired files from storage (a file already gone is fine);
3. delete their catalog rows: the files are gone, and no kept snapshot sees them;
4. delete the catalog's own history that no kept snapshot needs: old plans, tasks
   and transitions, snapshot rows, merge history (``firn.catalog.pruning``).

Recorded orphans (``orphan_file``: outputs of failed, replaced or killed attempts,
staged files of producer commits that did not land) older than ``orphan.retention``
are first claimed (``deleted_at``, the fence a slow producer's commit checks:
``firn.catalog.commits``), then deleted from storage, then their rows; a claimed row
left by a crash is finished by the next run. A path the catalog still lists as a
data file is never deleted as an orphan. A recorded path ending in ``/`` is a
directory (a killed attempt's): everything under it goes.

Last, unless told not to, the storage-listing sweep (``firn.catalog.orphans``)
deletes the files under the table's location that the catalog does not know.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from firn.catalog.orphans import Progress, SweepResult, sweep_storage
from firn.catalog.pruning import PrunedHistory, prune_history
from firn.errors import ConfigError
from firn.io.storage import Storage
from firn.model.properties import TableProperties
from firn.postgres.connection import Connection

log = logging.getLogger(__name__)

BATCH = 500
"""Files deleted from storage before their rows are deleted: bounds what a crash
leaves for the rerun to delete a second time."""


@dataclass(frozen=True)
class TableExpiry:
    """What expiry did (or, in a dry run, would do) to one table."""

    table: str
    keep_from: int
    """The oldest snapshot still readable; 0 when the table has no snapshot."""
    expired_snapshots: int
    """Snapshots marked expired by this run."""
    files: tuple[str, ...]
    """Data files deleted, relative to the table's location."""
    bytes: int
    """Their total size."""
    orphans: tuple[str, ...]
    """Recorded orphans deleted (a path ending in ``/`` is a directory), relative to
    the table's location."""
    swept: tuple[str, ...] = ()
    """Files the storage sweep deleted: unknown to the catalog, older than
    ``orphan.retention`` (how many it listed goes to the log and the progress
    callback: a dry run lists the files expiry would delete too)."""
    swept_bytes: int = 0
    history: PrunedHistory = field(default_factory=PrunedHistory)
    """The catalog's own history rows retention deleted (``firn.catalog.pruning``)."""


@dataclass(frozen=True)
class ExpiryReport:
    """What one expiry run did, per table."""

    dry_run: bool
    tables: tuple[TableExpiry, ...]

    @property
    def files(self) -> int:
        return sum(len(t.files) for t in self.tables)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tables)

    @property
    def orphans(self) -> int:
        return sum(len(t.orphans) for t in self.tables)

    @property
    def swept(self) -> int:
        return sum(len(t.swept) for t in self.tables)

    @property
    def expired_snapshots(self) -> int:
        return sum(t.expired_snapshots for t in self.tables)

    @property
    def history_rows(self) -> int:
        return sum(t.history.rows for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "expired_snapshots": self.expired_snapshots,
            "files": self.files,
            "bytes": self.bytes,
            "orphans": self.orphans,
            "swept": self.swept,
            "history_rows": self.history_rows,
            "tables": [asdict(t) for t in self.tables],
        }


@dataclass(frozen=True)
class _TableRow:
    table_id: int
    name: str
    properties: TableProperties
    location: str


def expire(
    conn: Connection,
    table: str | None = None,
    *,
    dry_run: bool = False,
    list_storage: bool = True,
    progress: Progress | None = None,
) -> ExpiryReport:
    """Apply retention to ``table`` (every table when ``None``); with ``dry_run``,
    report what would go and change nothing. ``list_storage`` adds the storage
    sweep, whose counts go to ``progress`` as it lists. Idempotent."""
    rows = _tables(conn, table)
    return ExpiryReport(
        dry_run,
        tuple(_expire_table(conn, row, dry_run, list_storage, progress) for row in rows),
    )


def _tables(conn: Connection, name: str | None) -> list[_TableRow]:
    query = "SELECT table_id, name, properties, location FROM catalog_table"
    if name is None:
        found = conn.execute(f"{query} ORDER BY name").fetchall()
    else:
        # Postgres cannot compare a name with NUL in it; no table has one.
        found = (
            [] if "\x00" in name else conn.execute(f"{query} WHERE name = %s", (name,)).fetchall()
        )
        if not found:
            raise ConfigError(f"no table named {name!r}")
    return [_TableRow(tid, n, TableProperties.from_catalog(p, n), loc) for tid, n, p, loc in found]


def _expire_table(
    conn: Connection,
    table: _TableRow,
    dry_run: bool,
    list_storage: bool,
    progress: Progress | None,
) -> TableExpiry:
    props = table.properties
    # One clock (the database's) for every comparison with created_at / recorded_at.
    cutoffs = conn.execute(
        "SELECT now() - make_interval(secs => %s), now() - make_interval(secs => %s)",
        (props.snapshot_retention, props.orphan_retention),
    ).fetchone()
    assert cutoffs is not None
    snapshot_cutoff, orphan_cutoff = cutoffs
    keep_from = _keep_from(conn, table.table_id, snapshot_cutoff)
    expired = _expire_snapshots(conn, table.table_id, keep_from, dry_run)
    files = _expired_files(conn, table.table_id, keep_from, snapshot_cutoff)
    orphans = _expired_orphans(conn, table.table_id, orphan_cutoff, dry_run)
    storage = Storage(table.location)
    if not dry_run and (files.rows or files.forgotten_vectors or orphans):
        # Storage first, then the rows: a run that dies in between leaves rows naming
        # missing files, which the next run deletes again (deleting is idempotent).
        for start in range(0, len(files.paths), BATCH):
            _delete(storage, [path for path, _ in files.paths[start : start + BATCH]])
        for start in range(0, len(files.rows), BATCH):
            with conn.transaction():
                conn.execute(
                    "DELETE FROM data_file WHERE file_id = ANY(%s)",
                    (files.rows[start : start + BATCH],),
                )
        for start in range(0, len(files.forgotten_vectors), BATCH):
            with conn.transaction():
                conn.execute(
                    "UPDATE data_file SET dv_path = NULL, dv_size_bytes = NULL, dv_rows = NULL "
                    "WHERE file_id = ANY(%s)",
                    (files.forgotten_vectors[start : start + BATCH],),
                )
        for start in range(0, len(orphans), BATCH):
            paths = orphans[start : start + BATCH]
            _delete(storage, paths)
            with conn.transaction():
                conn.execute(
                    "DELETE FROM orphan_file WHERE table_id = %s AND path = ANY(%s)",
                    (table.table_id, paths),
                )
        log.info(
            "%s: expired %d snapshot(s) before %d, %d file(s) (%d bytes), %d orphan(s)",
            table.name,
            expired,
            keep_from,
            len(files.paths),
            sum(size for _, size in files.paths),
            len(orphans),
        )
    history = prune_history(
        conn,
        table.table_id,
        keep_from,
        snapshot_cutoff,
        dry_run=dry_run,
        dropped_files=files.rows,
    )
    if history.rows and not dry_run:
        log.info("%s: pruned %d history row(s): %s", table.name, history.rows, history)
    swept = SweepResult(0, (), 0)
    if list_storage:
        swept = sweep_storage(
            conn,
            table.table_id,
            table.name,
            storage,
            orphan_cutoff,
            dry_run=dry_run,
            progress=progress,
        )
    return TableExpiry(
        table=table.name,
        keep_from=keep_from,
        expired_snapshots=expired,
        files=tuple(path for path, _ in files.paths),
        bytes=sum(size for _, size in files.paths),
        orphans=tuple(orphans),
        swept=swept.unreferenced,
        swept_bytes=swept.bytes,
        history=history,
    )


def _keep_from(conn: Connection, table_id: int, cutoff: dt.datetime) -> int:
    # A Firn snapshot a retained published Iceberg snapshot shows stays readable too:
    # an Iceberg reader holding it reads its files (firn.iceberg.publisher).
    row = conn.execute(
        "SELECT least(coalesce((SELECT min(snapshot_id) FROM snapshot WHERE table_id = t.table_id "
        "AND created_at >= %s), t.last_snapshot), (SELECT min(firn_snapshot) FROM "
        "iceberg_snapshot WHERE table_id = t.table_id)) FROM catalog_table t WHERE t.table_id = %s",
        (cutoff, table_id),
    ).fetchone()
    if row is None:
        raise ConfigError(f"table {table_id} no longer exists")
    return int(row[0])


def _expire_snapshots(conn: Connection, table_id: int, keep_from: int, dry_run: bool) -> int:
    if dry_run:
        row = conn.execute(
            "SELECT count(*) FROM snapshot WHERE table_id = %s AND snapshot_id < %s "
            "AND expired_at IS NULL",
            (table_id, keep_from),
        ).fetchone()
        return int(row[0]) if row else 0
    with conn.transaction():
        return conn.execute(
            "UPDATE snapshot SET expired_at = now() WHERE table_id = %s AND snapshot_id < %s "
            "AND expired_at IS NULL",
            (table_id, keep_from),
        ).rowcount


def _expired(alias: str) -> str:
    """A file row (``alias``) removed by a snapshot older than what retention keeps.
    A snapshot before ``keep_from`` was created before the cutoff (``keep_from`` is
    at most the oldest one created after it), so only ``keep_from`` itself needs its
    row read: the others' rows may already be pruned (``firn.catalog.pruning``).
    Never NULL (a live row is not expired), as the callers negate it."""
    return (
        f"{alias}.table_id = %(table)s AND {alias}.removed_snapshot IS NOT NULL "
        f"AND ({alias}.removed_snapshot < %(keep)s "
        f"OR ({alias}.removed_snapshot = %(keep)s AND EXISTS "
        f"(SELECT 1 FROM snapshot s WHERE s.table_id = {alias}.table_id "
        f"AND s.snapshot_id = {alias}.removed_snapshot AND s.created_at < %(cutoff)s)))"
    )


@dataclass(frozen=True)
class _ExpiredFiles:
    """The rows retention drops, and the paths it deletes from storage."""

    rows: list[int]
    paths: list[tuple[str, int]]
    """Path and size, once each: data files and deletion vectors."""
    forgotten_vectors: list[int]
    """Rows kept back (their data path is still named) whose deletion vector goes:
    their vector columns are cleared once the vector file is deleted."""


def _expired_files(
    conn: Connection, table_id: int, keep_from: int, cutoff: dt.datetime
) -> _ExpiredFiles:
    """Rows removed before what retention keeps, except those whose path a kept row
    still names: a change file moved into base has a removed change row and a live
    base row under one path, and both go (with the file) once neither is kept. A
    deletion vector goes with the first expired row naming it that no kept row
    names: a base file given a new vector keeps its path but not its old vector."""
    params = {"table": table_id, "keep": keep_from, "cutoff": cutoff}
    rows = conn.execute(
        f"SELECT f.file_id, f.path, f.size_bytes FROM data_file f WHERE {_expired('f')} "
        f"AND NOT EXISTS (SELECT 1 FROM data_file g WHERE g.table_id = f.table_id "
        f"AND g.path = f.path AND g.file_id <> f.file_id AND NOT ({_expired('g')})) "
        f"ORDER BY f.file_id",
        params,
    ).fetchall()
    vectors = conn.execute(
        f"SELECT f.file_id, f.dv_path, f.dv_size_bytes FROM data_file f WHERE {_expired('f')} "
        f"AND f.dv_path IS NOT NULL AND NOT EXISTS (SELECT 1 FROM data_file g "
        f"WHERE g.table_id = f.table_id AND g.dv_path = f.dv_path AND NOT ({_expired('g')})) "
        f"ORDER BY f.file_id",
        params,
    ).fetchall()
    dropped = [int(fid) for fid, *_ in rows]
    paths = {str(path): int(size) for _, path, size in rows}
    paths.update({str(path): int(size) for _, path, size in vectors})
    gone = set(dropped)
    forgotten = [int(fid) for fid, *_ in vectors if int(fid) not in gone]
    return _ExpiredFiles(dropped, sorted(paths.items()), forgotten)


_UNREFERENCED = (
    "NOT EXISTS (SELECT 1 FROM data_file d WHERE d.path = o.path) "
    "AND NOT EXISTS (SELECT 1 FROM data_file d WHERE d.dv_path = o.path) "
    "AND NOT (right(o.path, 1) = '/' AND EXISTS (SELECT 1 FROM data_file d "
    "WHERE d.table_id = o.table_id AND (left(d.path, length(o.path)) = o.path "
    "OR left(d.dv_path, length(o.path)) = o.path)))"
)
"""A recorded orphan the catalog does not list as a data file or deletion vector (nor,
for a directory, any under it)."""


def _expired_orphans(
    conn: Connection, table_id: int, cutoff: dt.datetime, dry_run: bool
) -> list[str]:
    """Recorded orphans to delete: claimed now, or by an earlier run that died."""
    due = f"o.deleted_at IS NULL AND o.recorded_at < %s AND {_UNREFERENCED}"
    if dry_run:
        rows = conn.execute(
            f"SELECT o.path FROM orphan_file o WHERE o.table_id = %s "
            f"AND (o.deleted_at IS NOT NULL OR ({due})) ORDER BY o.path",
            (table_id, cutoff),
        ).fetchall()
        return [str(path) for (path,) in rows]
    with conn.transaction():
        conn.execute(
            f"UPDATE orphan_file o SET deleted_at = now() WHERE o.table_id = %s AND {due}",
            (table_id, cutoff),
        )
    rows = conn.execute(
        "SELECT path FROM orphan_file WHERE table_id = %s AND deleted_at IS NOT NULL ORDER BY path",
        (table_id,),
    ).fetchall()
    return [str(path) for (path,) in rows]


def _delete(storage: Storage, paths: Sequence[str]) -> None:
    for path in paths:
        if path.endswith("/"):
            storage.delete_dir(path)
        else:
            storage.delete(path)
