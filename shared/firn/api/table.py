"""``Table``: commit change sets, read the merged view, list files and status (design §10).

A Table talks only to a ``TableCatalog`` (``firn.model.table_catalog``): the Postgres
catalog behind ``firn.connect``, or a fake in tests. A commit is four steps, in this
order (design §3):

1. choose the change files' paths and record them as staged;
2. write the change files (nothing refers to them yet);
3. register files, seq and snapshot in ONE catalog step, which also clears the
   staged records: the commit point;
4. announce the commit (a Kafka event, with a bounded wait).

When the outcome is known to be a failure (writing failed, or the catalog says the
commit did not land) the staged files and their records are deleted at once. When
the outcome is unknown (``CommitStateUnknownError``) the files are kept, because
deleting them would corrupt the commit if it did land: their records settle it
later, and orphan cleanup deletes a recorded file after ``orphan.retention``
(``firn.catalog.commits``, ``firn.catalog.expiry``).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from firn.api.schema_update import UpdateSchema
from firn.engine.loading import group_rows, write_groups
from firn.engine.staging import ChangeGroup, file_name, split_changes, write_group
from firn.engine.table_scan import Scan, check_columns
from firn.engine.verify import Progress, VerifyReport, verify_files
from firn.errors import (
    CommitError,
    CommitStateUnknownError,
    ConfigError,
    FirnError,
    StorageError,
)
from firn.io.storage import Storage
from firn.model.changes import DELETE, OP, UPSERT, validate_changes, validate_rows
from firn.model.commits import (
    CommitResult,
    Committed,
    Delivery,
    StagedFile,
    Stall,
    StreamBatch,
)
from firn.model.evolution import SchemaChange, new_columns
from firn.model.filter_text import as_filter
from firn.model.partition_names import PartitionName, partition_keys
from firn.model.properties import TableProperties
from firn.model.schema import SchemaVersion, TableSchema
from firn.model.table_catalog import TableCatalog

log = logging.getLogger(__name__)
STALL_POLL_SECONDS = (0.02, 0.5)
"""How long a commit waiting out a stall (``stall_wait``) sleeps before looking again:
the first wait, growing by half at each look up to the second. A compaction cycle
takes a few hundred milliseconds; a fixed half second made every stalled commit wait
at least that long, so a producer honouring back-pressure lost far more time than
compaction needed (bench/policy.py, ``write.stall-runs`` 5: 5,700 of the 20,000 rows/s
asked for; 14,900 with these looks)."""


MERGE_SCHEMA_ATTEMPTS = 5
"""Schema changes ``merge_schema`` tries before giving up on concurrent ones."""

STAGE_ATTEMPTS = 5
"""Times a commit checks its change set again after staging found the schema changed
meanwhile, before giving up on a table whose schema keeps changing."""


class Table:
    """A handle on one table; cheap to create, bound to its catalog."""

    def __init__(
        self,
        catalog: TableCatalog,
        table_id: int,
        definition: TableSchema,
        properties: TableProperties,
        location: str,
    ) -> None:
        self.catalog = catalog
        self.table_id = table_id
        self.definition = definition
        self.properties = properties
        self.location = location
        self.storage = Storage(location)
        self._last_event: Delivery | None = None
        self._told_stall_before_due = False
        self._versions: dict[int, TableSchema] = {}
        """Schema versions looked up so far, by id (reads of older snapshots)."""

    def __repr__(self) -> str:
        return f"Table({self.name!r}, id={self.table_id}, location={self.location!r})"

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def schema(self) -> pa.Schema:
        """The table's columns at its current schema version, as this handle last saw
        it (every commit, read and ``update_schema`` looks; ``refresh`` does too).
        Each field carries its field id (``PARQUET:field_id``), doc and default."""
        return self.definition.schema

    @property
    def schema_id(self) -> int:
        """The current schema version's id, as this handle last saw it."""
        return self.definition.schema_id

    # -- schema evolution ------------------------------------------------------

    def update_schema(self) -> UpdateSchema:
        """Change the table's schema: ``with table.update_schema() as u:`` then
        ``u.add_column(...)``, ``delete_column``, ``rename_column``, ``update_column``,
        ``move_first``, ``move_after``, ``move_before``. At the end of the block the
        operations apply as ONE new schema version (one catalog transaction, one
        snapshot), or, if any is refused or the block raises, not at all. Without
        ``with``, call ``commit()``. Producers, compaction and readers keep running:
        files written under earlier versions are read by field id."""
        self.refresh()
        return UpdateSchema(self.definition, self._commit_schema_change)

    def _commit_schema_change(self, change: SchemaChange) -> SchemaVersion | None:
        """One block's operations as the next version (None: they changed nothing)."""
        definition = change.apply()
        if definition is change.current:
            return None
        version = self.catalog.commit_schema(
            self.table_id, change.current.schema_id, definition, change.operations
        )
        self.refresh()
        log.info(
            "%s: schema version %d at snapshot %d: %s",
            self.name,
            version.schema_id,
            version.snapshot_id,
            "; ".join(change.operations),
        )
        return version

    def schemas(self) -> list[SchemaVersion]:
        """Every schema version, oldest first: ``schema_id``, ``schema``, the snapshot
        it began at (``snapshot_id``), when, and what changed (``changes``)."""
        return self.catalog.schema_versions(self.table_id)

    def refresh(self) -> Table:
        """Look up the table's current schema version (another process may have
        changed it); returns the table."""
        current = self.catalog.current_schema_id(self.table_id)
        if current != self.definition.schema_id:
            self._adopt(current)
        return self

    def _adopt(self, schema_id: int) -> TableSchema:
        """Make version ``schema_id`` (or a newer one, when the table moved on) this
        handle's definition, with every version known."""
        versions = {v.schema_id: v.definition for v in self.catalog.schema_versions(self.table_id)}
        self._versions = versions
        newest = versions[max(versions)]
        if newest.schema_id >= self.definition.schema_id:
            self.definition = newest
        return versions[schema_id]

    def definition_at(self, snapshot: int | None = None) -> TableSchema:
        """The table's definition (columns, key, field ids) as a read of ``snapshot``
        sees it (default: the latest)."""
        return self._definition_at(self._readable(snapshot))

    def _definition_at(self, snapshot: int) -> TableSchema:
        """The definition a read of ``snapshot`` uses: that snapshot's version."""
        schema_id = self.catalog.schema_id_at(self.table_id, snapshot)
        if schema_id == self.definition.schema_id:
            return self.definition
        known = self._versions.get(schema_id)
        return known if known is not None else self._adopt(schema_id)

    # -- writing ---------------------------------------------------------------

    def commit(
        self,
        changes: pa.Table,
        *,
        stall_wait: float | None = None,
        merge_schema: bool = False,
    ) -> Committed:
        """Apply a change set (table columns plus ``_op``) atomically; returns its seq
        (a ``Committed``: an ``int`` that also reports back-pressure).

        The change set is checked against the table's current schema version: a
        column a schema change added may be missing (its rows take the column's
        default), a dropped one is refused unless ``schema.ignore-dropped-columns`` is
        set, and a column the table does not know is refused, or with
        ``merge_schema=True`` added to the schema first (a nullable column of the
        change set's type, as one schema version of its own).

        When a change node of a partition the commit wrote has ``write.stall-runs``
        sorted runs or more, compaction is not keeping up: the result's ``stalls``
        name them (and a warning is logged). With ``stall_wait`` (seconds) the call
        then waits, up to that long, until compaction brings them below the limit,
        so a producer that passes it slows down instead of letting reads degrade.
        The commit itself has landed either way."""
        lap = _Laps()
        if merge_schema and isinstance(changes, pa.Table | pa.RecordBatch):
            self.merge_schema(changes.schema)
        # Checked against the schema version this handle knows; staging answers the
        # current one, and a change set checked against an older one is checked again.
        for _ in range(STAGE_ATTEMPTS):
            try:
                groups, paths = self._split(changes, lap)
            except ConfigError:
                # Refused by the version this handle knows: if the table has moved
                # on, the change set may fit the current one (a column dropped since).
                known = self.definition.schema_id
                if self.refresh().definition.schema_id == known:
                    raise
                groups, paths = self._split(changes, lap)
            try:
                current = self.catalog.stage_commit(self.table_id, paths)
            except CommitError as exc:
                raise _about(self.name, exc) from exc
            if current == self.definition.schema_id:
                break
            self.catalog.unstage_paths(self.table_id, paths)  # nothing written yet
            self._adopt(current)
        else:
            raise CommitError(
                f"the schema of {self.name!r} changed during each of {STAGE_ATTEMPTS} tries "
                "to commit; nothing was written",
                retryable=True,
            )
        lap("stage")
        try:
            staged = [
                write_group(
                    self.definition,
                    self.storage,
                    group,
                    path,
                    self.properties.file_compression,
                )
                for group, path in zip(groups, paths, strict=True)
            ]
        except BaseException:
            self._discard(paths)
            raise
        lap("write")
        look = self.properties.write_stall_runs > 0
        result = self._register(
            [f.path for f in staged],
            lambda: self.catalog.register_commit(self.table_id, staged, busiest=look),
        )
        lap("register")
        self._announce(result, staged)
        lap("announce")
        committed = self._back_pressure(
            result.seq, {f.partition_key for f in staged}, stall_wait, result.busiest
        )
        lap("back_pressure")
        committed.phases = lap.laps
        return committed

    def _split(self, changes: pa.Table, lap: _Laps) -> tuple[list[ChangeGroup], list[str]]:
        """The change set checked against this handle's schema version, and its
        rows split into the files to write (with their paths)."""
        validated = validate_changes(
            self.definition, changes, ignore_dropped=self.properties.schema_ignore_dropped
        )
        if validated.num_rows == 0:
            raise ConfigError("the change set is empty; there is nothing to commit")
        if not self.definition.keyed and pc.any(pc.equal(validated.column(OP), DELETE)).as_py():
            raise ConfigError(f"table {self.name!r} has no primary key: it only takes upserts")
        lap("validate")
        groups = split_changes(
            self.definition,
            self.properties.change_buckets,
            validated,
            self.properties.change_split_rows,
        )
        lap("split")
        return groups, [file_name(group) for group in groups]

    def merge_schema(self, schema: pa.Schema, ignore: Sequence[str] = ()) -> SchemaVersion | None:
        """Add the columns of ``schema`` (a change set's or a DataFrame's) that the
        table has never had, as nullable columns of their types, in one schema
        version; returns it (None: nothing was new). A writer that added them first
        is fine. What ``commit(merge_schema=True)`` and Spark's ``mergeSchema`` do.
        ``ignore``: names that are not columns (a write's ``order_by``)."""
        if not isinstance(schema, pa.Schema):
            raise ConfigError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
        for attempt in range(MERGE_SCHEMA_ATTEMPTS):
            self.refresh()
            new = new_columns(self.definition, schema, extra=(OP, *ignore))
            if not new:
                return None
            try:
                with self.update_schema() as update:
                    for field in new:
                        update.add_column(field.name, field.type)
                log.info("%s: merge_schema added %s", self.name, [f.name for f in new])
                return update.committed
            except CommitError:
                if attempt == MERGE_SCHEMA_ATTEMPTS - 1:
                    raise
        return None

    def _back_pressure(
        self,
        seq: int,
        partitions: set[str],
        wait: float | None,
        first: dict[str, tuple[str, int]] | None = None,
    ) -> Committed:
        """The stalls the commit found (``first``: the look the commit's registration
        took, so the first costs no round trip), waiting up to ``wait`` seconds for
        compaction to clear them."""
        limit = self.properties.write_stall_runs
        if limit == 0:
            return Committed(seq)
        if wait is not None:
            self._tell_stall_before_due(limit, wait)
        started = time.monotonic()
        slept = False
        pause, longest = STALL_POLL_SECONDS
        while True:
            # Only the time spent waiting for compaction counts, not the first look.
            waited = time.monotonic() - started if slept else 0.0
            try:
                busiest = (
                    first
                    if first is not None and not slept
                    else self.catalog.busiest_nodes(self.table_id, sorted(partitions))
                )
            except FirnError as exc:  # the commit has landed: never fail it for this
                log.warning("%s: back-pressure not checked after seq %d: %s", self.name, seq, exc)
                return Committed(seq, waited=round(waited, 3))
            stalls = tuple(
                Stall(part, node, runs, limit)
                for part, (node, runs) in sorted(busiest.items())
                if runs >= limit
            )
            if not stalls or wait is None or waited >= wait:
                break
            time.sleep(min(pause, wait - waited))
            pause = min(pause * 1.5, longest)
            slept = True
        if stalls:
            log.warning(
                "%s: compaction is behind after seq %d: %s (write.stall-runs %d)",
                self.name,
                seq,
                ", ".join(
                    f"{s.partition_key or '(table)'} node {s.node}: {s.runs} runs" for s in stalls
                ),
                limit,
            )
        return Committed(seq, stalls, round(waited, 3))

    def load(
        self, rows: pa.Table, partitions: PartitionName | Iterable[PartitionName] | None = None
    ) -> int:
        """Replace the table's content with ``rows``, written straight to base files in
        key order (no change files, nothing left for compaction); returns the seq.

        ``partitions=None`` replaces the whole table: every partition not in ``rows``
        ends up empty. Naming partitions (``"region=eu"`` or ``{"region": "eu"}``, or
        a list of them) replaces only those, and every row must belong to one of
        them; the others are untouched. Atomic like a commit: one seq and snapshot,
        in which every earlier file of those partitions is gone and no change
        committed before is ever merged back; changes committed later apply on top.
        ``rows`` has exactly the table's columns (no ``_op``) and at most one row
        per key (``ConfigError`` otherwise: use ``commit`` to apply changes in
        order). A compaction running on a replaced partition fails when it tries to
        commit, and the partition is planned again. A load publishes no commit
        event (it leaves nothing to compact); the metrics service sees it at its
        next catalog check. Columns follow the schema as ``commit``'s do."""
        self.refresh()
        validated = validate_rows(
            self.definition, rows, ignore_dropped=self.properties.schema_ignore_dropped
        )
        named = None if partitions is None else partition_keys(self.definition, partitions)
        groups = group_rows(self.definition, self.properties.base_buckets, validated)
        if named is not None:
            outside = sorted({g.partition_key for g in groups} - set(named))
            if outside:
                raise ConfigError(
                    f"rows of partitions {outside[:5]} are not among the partitions the "
                    f"load replaces {sorted(named)[:5]}"
                )
        staged_dir = self.stage_directory("load")
        try:
            staged = write_groups(
                self.definition,
                self.storage,
                staged_dir.rstrip("/"),
                validated,
                groups,
                self.properties.target_file_size,
                compression=self.properties.file_compression,
            )
        except BaseException:
            self._discard([staged_dir])
            raise
        result = self._register(
            [staged_dir],
            lambda: self.catalog.register_load(self.table_id, staged, staged_dir, named),
        )
        log.info(
            "%s: loaded %d rows as %d base files, seq %d",
            self.name,
            validated.num_rows,
            len(staged),
            result.seq,
        )
        return result.seq

    def _tell_stall_before_due(self, limit: int, wait: float) -> None:
        """Once per handle: a stall limit at or below ``minor.file-count`` stalls a node
        before compaction is due for it (design §4: more than ``minor.file-count`` runs), so
        a commit that waits may wait out all of ``stall_wait`` for a compaction nobody
        asked for (until another commit or the periodic check makes it due)."""
        due = self.properties.minor_file_count
        if limit > due or self._told_stall_before_due:
            return
        self._told_stall_before_due = True
        log.warning(
            "%s: write.stall-runs (%d) is not above minor.file-count (%d): a stalled "
            "commit waits for compaction a node is not due for yet, up to stall_wait (%gs) "
            "each time; raise write.stall-runs above %d",
            self.name,
            limit,
            due,
            wait,
            due,
        )

    def upsert(self, rows: pa.Table, *, stall_wait: float | None = None) -> Committed:
        """Insert or replace whole rows (every table column); returns the seq."""
        return self.commit(_with_op(rows, UPSERT), stall_wait=stall_wait)

    def delete(self, keys: pa.Table) -> int:
        """Delete rows by key (a table with the key columns); returns the seq."""
        if not isinstance(keys, pa.Table):
            raise ConfigError(f"keys must be a pyarrow.Table, got {type(keys).__name__}")
        self.refresh()
        missing = [c for c in self.definition.primary_key if c not in keys.column_names]
        if missing or not self.definition.keyed:
            raise ConfigError(f"delete needs the key columns {list(self.definition.primary_key)}")
        columns = [
            keys.column(f.name) if f.name in keys.column_names else pa.nulls(keys.num_rows, f.type)
            for f in self.schema
        ]
        return self.commit(_with_op(pa.table(columns, names=self.schema.names), DELETE))

    # -- files written elsewhere (the Spark writer) ------------------------------

    def stage_directory(self, kind: str, stream_id: str | None = None) -> str:
        """Record a new directory (``<kind>/<uuid>/``) as staged before writers that
        cannot reach the catalog (Spark executors) write under it; returns it. A
        stream's directory is named after its id instead, so that every writer of
        the stream (Spark makes several) agrees on it, and staging it again only
        refreshes its record."""
        if stream_id is None:
            staged_dir = f"{kind}/{uuid.uuid4().hex}/"
        else:
            staged_dir = f"{kind}/{hashlib.sha256(stream_id.encode()).hexdigest()[:32]}/"
        try:
            self.catalog.stage_paths(self.table_id, [staged_dir], refresh=stream_id is not None)
        except CommitError as exc:
            raise _about(self.name, exc) from exc
        return staged_dir

    def discard_directory(self, staged_dir: str) -> None:
        """Delete a staged directory whose writing failed or was aborted, and its record."""
        self._discard([staged_dir])

    def commit_staged(
        self,
        staged: Sequence[StagedFile],
        staged_dir: str,
        *,
        stream: StreamBatch | None = None,
    ) -> int:
        """Commit change files written under ``staged_dir`` (``stage_directory``) as
        one change set; returns the seq. On a known failure the directory goes. A
        stream keeps its directory for its next batches (``stream``)."""
        # A stream's directory stays staged for its next batches: only this batch's
        # files go on a failure.
        discard = [f.path for f in staged] if stream is not None else [staged_dir]
        result = self._register(
            discard,
            lambda: self.catalog.register_commit(
                self.table_id, staged, staged_dir=staged_dir, stream=stream
            ),
        )
        self._announce(result, list(staged))
        return result.seq

    def load_staged(
        self,
        staged: Sequence[StagedFile],
        staged_dir: str,
        partitions: PartitionName | Iterable[PartitionName] | None,
    ) -> int:
        """Register base files written under ``staged_dir`` as a load replacing
        ``partitions`` (None: the whole table), as ``load`` does; returns the seq."""
        named = None if partitions is None else partition_keys(self.definition, partitions)
        if named is not None:
            outside = sorted({f.partition_key for f in staged} - set(named))
            if outside:
                raise ConfigError(f"files of partitions {outside[:5]} the load does not replace")
        result = self._register(
            [staged_dir],
            lambda: self.catalog.register_load(self.table_id, staged, staged_dir, named),
        )
        return result.seq

    def _register(self, paths: list[str], register: Callable[[], CommitResult]) -> CommitResult:
        """Run the catalog step that lands staged ``paths`` (files, or directories
        ending in ``/``); delete them when it is known to have failed."""
        try:
            return register()
        except CommitStateUnknownError as exc:
            raise _about(self.name, exc) from exc
        except CommitError as exc:
            self._discard(paths)
            raise _about(self.name, exc) from exc
        except Exception:
            # Any other error came before the commit point (the catalog turns every
            # failure at COMMIT into one of the two above). An interrupt is not sure
            # to have: the files stay recorded, and orphan cleanup decides.
            self._discard(paths)
            raise

    def _discard(self, paths: list[str]) -> None:
        """Delete staged files (or directories, ending in ``/``) of a commit known to
        have failed, then their records."""
        try:
            for path in paths:
                if path.endswith("/"):
                    self.storage.delete_dir(path)
                else:
                    self.storage.delete(path)
            self.catalog.unstage_paths(self.table_id, paths)
        except (StorageError, CommitError) as exc:
            # Still recorded as staged: orphan cleanup deletes them after orphan.retention.
            log.warning("staged files of a failed commit to %s left behind: %s", self.name, exc)

    def _announce(self, result: CommitResult, staged: list[StagedFile]) -> None:
        """Best effort, and not waited for: the commit has landed, and nothing here may
        make it look as if it had not (metrics finds it at its periodic catalog check)."""
        try:
            self._last_event = self.catalog.announce_commit(
                self.name, self.table_id, result, staged
            )
        except Exception:
            log.exception("%s: commit seq %d landed; its event was not sent", self.name, result.seq)
            self._last_event = _NOT_SENT

    @property
    def last_event_delivered(self) -> bool | None:
        """Whether the last commit's event was acknowledged by Kafka (None: there is no
        Kafka to tell). A commit does not wait for the acknowledgement; asking does,
        up to ``commit_event_timeout_seconds``."""
        return None if self._last_event is None else self._last_event.delivered()

    def set_properties(self, updates: dict[str, Any]) -> TableProperties:
        """Change some properties (dotted names, design §8); the rest keep their values.

        Changing ``change.buckets`` or ``base.buckets`` affects files written from now
        on; existing files stay where they are (the planner projects them onto the
        new write level). Other handles on this table see the change once reopened
        with ``Catalog.table``."""
        if not isinstance(updates, dict):
            raise ConfigError(f"updates must be a dict, got {type(updates).__name__}")
        properties = self.properties.merged(updates)
        if not self.catalog.save_properties(self.table_id, properties):
            raise ConfigError(f"table {self.name!r} no longer exists")
        self.properties = properties
        return properties

    # -- reading ---------------------------------------------------------------

    def current_snapshot(self) -> int:
        """The id of the latest snapshot (0 before the first commit)."""
        return self.catalog.current_snapshot(self.table_id)

    def _readable(self, snapshot: int | None) -> int:
        """``snapshot``, checked to exist and not be expired; the latest when None."""
        if snapshot is None:
            return self.catalog.current_snapshot(self.table_id)
        self.catalog.check_snapshot(self.table_id, snapshot)
        return snapshot

    def scan(
        self,
        filter: object = None,
        columns: Sequence[str] | None = None,
        snapshot: int | None = None,
        *,
        merged_only: bool = False,
    ) -> Scan:
        """A planned read of the merged view at ``snapshot`` (default: the latest).

        ``filter`` is a string such as ``"region = 'eu' and id in (1, 2)"``, a
        ``pyarrow.compute.Expression`` or a ``firn.filters`` object; ``columns``
        the columns to return (default: all). Files that cannot hold a selected
        row are skipped before anything is read (``Scan.explain`` says which and
        why). The result: ``to_arrow()``, ``to_batches()``, ``splits()``. An unknown
        column or a malformed filter raises ``ConfigError``. The columns, and the names
        the filter may use, are those of the snapshot's schema version: files written
        under other versions are read by field id (renamed columns keep their values,
        added ones read as their default, dropped ones are gone).

        ``merged_only`` reads only what compaction has folded (base files and their
        deletion vectors, not the change files above each partition's merged seq):
        the rows the table's published Iceberg table shows at this snapshot."""
        snapshot = self._readable(snapshot)
        definition = self._definition_at(snapshot)
        bound = as_filter(filter, definition.schema)
        names = check_columns(definition, columns)
        entries = self.catalog.files_at(self.table_id, snapshot)
        if merged_only:
            entries = [e for e in entries if e.store == "base"]
        merged = self.catalog.merged_seqs_at(self.table_id, snapshot)
        return Scan(self.location, definition, snapshot, entries, merged, bound, names)

    def read(self, snapshot: int | None = None) -> pa.Table:
        """The merged view at ``snapshot`` (default: the latest), table columns only:
        ``scan(snapshot=snapshot).to_arrow()``.

        Row order is unspecified. Reading needs no lock and no long transaction: a
        snapshot's files and merge state never change once it is visible. A file
        that is missing, damaged, or not the size or record count the catalog
        recorded raises ``CorruptFileError`` (a ``StorageError``) naming it."""
        return self.scan(snapshot=snapshot).to_arrow()

    def changes(
        self,
        start_snapshot: int,
        end_snapshot: int | None = None,
        *,
        filter: object = None,
        columns: Sequence[str] | None = None,
    ) -> Scan:
        """The change rows producers committed after ``start_snapshot`` up to and
        including ``end_snapshot`` (default: the latest), as a ``Scan`` whose rows
        are the table's columns plus ``_op`` (``U``/``D``), ``_seq`` and ``_ord``,
        in commit order. Every row is returned, not the net effect per key (keep
        each key's last row by ``(_seq, _ord)`` for that); a delete row carries only
        its key. Compactions add no rows: they change how rows are stored, not the
        table. The filter's conditions on key columns apply to every row, the rest
        to upserts only. Both snapshots must still be readable (not expired). Rows
        come in the schema of ``end_snapshot``'s version, whatever version each was
        committed under."""
        if not isinstance(start_snapshot, int) or isinstance(start_snapshot, bool):
            raise ConfigError(f"start_snapshot must be a snapshot id, got {start_snapshot!r}")
        end = self._readable(end_snapshot)
        definition = self._definition_at(end)
        bound = as_filter(filter, definition.schema)
        names = check_columns(definition, columns)
        if not 0 <= start_snapshot <= end:
            raise ConfigError(
                f"start_snapshot {start_snapshot} must be between 0 and end_snapshot {end}"
            )
        self._readable(start_snapshot)
        if start_snapshot < end:
            # Snapshots expire oldest first: the first one of the range decides
            # whether all of its files are still kept.
            self._readable(start_snapshot + 1)
        entries = self.catalog.committed_changes(self.table_id, start_snapshot, end)
        return Scan(
            self.location,
            definition,
            end,
            entries,
            {},
            bound,
            names,
            start_snapshot=start_snapshot,
        )

    def verify(
        self, snapshot: int | None = None, *, deep: bool = False, progress: Progress | None = None
    ) -> VerifyReport:
        """Check every live file at ``snapshot`` (default: the latest) against the
        catalog: exists, size, Parquet footer, record count, columns; ``deep`` also
        decodes every row. Reports problems instead of raising (``firn verify``)."""
        snapshot = self._readable(snapshot)
        entries = self.catalog.files_at(self.table_id, snapshot)
        definition = self._definition_at(snapshot)
        return verify_files(
            self.storage, definition, snapshot, entries, deep=deep, progress=progress
        )

    def files(self, snapshot: int | None = None) -> pa.Table:
        """The live files: store, type, partition, node, seq, size, records, ...,
        ``deleted_records``, the rows of a base file its deletion vector hides, and
        ``deletion_vector``, that vector's own path (null: none), and ``schema_id``, the
        schema version it was written under; a live table's storage holds exactly the
        paths and vector paths listed here."""
        snapshot = self._readable(snapshot)
        entries = self.catalog.files_at(self.table_id, snapshot)
        return pa.table(
            {
                "file_id": pa.array([e.file_id for e in entries], pa.int64()),
                "store": pa.array([e.store for e in entries], pa.string()),
                "type": pa.array([e.file_type for e in entries], pa.string()),
                "partition": pa.array([e.partition_key for e in entries], pa.string()),
                "node": pa.array([str(e.node) for e in entries], pa.string()),
                "node_m": pa.array([e.node.m for e in entries], pa.int32()),
                "node_i": pa.array([e.node.i for e in entries], pa.int32()),
                "seq": pa.array([e.seq for e in entries], pa.int64()),
                "size": pa.array([e.size_bytes for e in entries], pa.int64()),
                "records": pa.array([e.record_count for e in entries], pa.int64()),
                "path": pa.array([e.path for e in entries], pa.string()),
                "added_snapshot": pa.array([e.added_snapshot for e in entries], pa.int64()),
                # Rows a deletion vector hides (a read skips them; 0: none).
                "deleted_records": pa.array(
                    [e.record_count - e.live_rows for e in entries], pa.int64()
                ),
                "deletion_vector": pa.array(
                    [e.deletion_vector.path if e.deletion_vector else None for e in entries],
                    pa.string(),
                ),
                # The schema version the file was written under (read by field id).
                "schema_id": pa.array([e.schema_id for e in entries], pa.int32()),
            }
        )

    def status(self) -> dict[str, Any]:
        """Per partition: merge state, what waits to be compacted, the trigger
        decision and score, the open plan and its task states, the last compaction."""
        return self.catalog.status(self.table_id, self.name, self.properties)


class _NotSent:
    """The delivery of an event that could not even be queued."""

    def delivered(self) -> bool:
        return False


_NOT_SENT = _NotSent()


class _Laps:
    """Seconds between successive calls, by name (``Committed.phases``); a step taken
    twice (a commit that checks its change set again) adds up."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._last, 6)
        self._last = now


def _with_op(rows: pa.Table, op: str) -> pa.Table:
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if not isinstance(rows, pa.Table):
        raise ConfigError(f"rows must be a pyarrow.Table, got {type(rows).__name__}")
    if OP in rows.column_names:
        raise ConfigError(f"rows already have an {OP!r} column; use Table.commit")
    return rows.append_column(OP, pa.array([op] * rows.num_rows, pa.string()))


def _about(table: str, exc: CommitError) -> CommitError:
    """The catalog's error, saying which table's commit it was about."""
    return type(exc)(f"commit to {table!r}: {exc}", retryable=exc.retryable)
