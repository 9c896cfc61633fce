"""One publication: a Firn table's compacted view at one snapshot, as one Iceberg commit.

What is published is what compaction has folded: the base files live at Firn
snapshot S, referenced in place, with the rows their deletion vectors hide as
position delete files (``firn.iceberg.writing``). Change files above a partition's
max_merged_seq are not (an Iceberg reader cannot merge them); the snapshot's
summary says how far each partition is folded (``firn.merged-seq-min``/``-max``
against ``firn.seq``), and ``Table.scan(snapshot=S, merged_only=True)`` reads the
same rows through Firn.

The steps, each safe to die after:

1. lock the table (a Postgres advisory lock: one publisher per table at a time);
2. read S, its files and schema, the SQL catalog's pointer and Firn's record of the
   last publication; a pointer that differs from the record was moved by someone
   else: reported, and the table is republished from Firn's catalog on top of it;
3. record the paths about to be written (``iceberg_file``), then write the position
   delete files and manifests of the partitions that changed, the manifest list and
   the metadata file;
4. in one transaction: move the pointer with a compare-and-set on the old location,
   record the publication and the new Iceberg snapshot, forget expired ones;
5. delete the files no retained snapshot uses any more.

A publisher killed before 4 leaves the previous snapshot current and files nobody
references, deleted once every snapshot at their sequence number has expired; a
rerun publishes again. Publications are ordered (each reads the newest S under the
lock) and idempotent (a table with nothing new since the recorded S is left alone).
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.manifest import DataFile, ManifestEntry, ManifestFile, write_manifest_list
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import (
    MetadataLogEntry,
    Operation,
    Snapshot,
    SnapshotLogEntry,
    Summary,
)
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.typedef import Record

from firn.catalog.files import current_snapshot, files_at, merged_seqs_at
from firn.catalog.orphans import PUBLISHED_DIR
from firn.catalog.schemas import definition_at
from firn.catalog.tables import TableRow, table_named, table_with_id
from firn.engine.scan import scan_base
from firn.errors import ConfigError, FirnError, StorageError
from firn.iceberg import pointers
from firn.iceberg.names import IcebergName, iceberg_name
from firn.iceberg.translate import (
    FIRST_PARTITION_FIELD_ID,
    iceberg_schema,
    key_bounds,
    lacks_defaults,
    partition_record,
    partition_spec,
)
from firn.iceberg.writing import (
    COPIES_DIR,
    FILE_PATH_ID,
    ManifestName,
    copy_name,
    data_file,
    delete_file_name,
    digest,
    partition_tag,
    write_manifest,
    write_position_deletes,
)
from firn.io.deletion_vectors import read_positions
from firn.io.storage import Storage, file_uri
from firn.model.files import FileEntry
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.postgres.connection import Connection

log = logging.getLogger(__name__)

DEFAULT_CATALOG = "firn"
"""The catalog name rows are written under: the name a reader passes to pyiceberg's
``load_catalog`` (``firn iceberg properties`` prints the rest)."""
LOCK_CLASS = 0x46524E49
"""First key of the per-table advisory lock ("FRNI")."""
DEFAULT_RETENTION = TableProperties.parse(None).iceberg_snapshot_retention
UNPUBLISHED_RETRY_SECONDS = 60
"""How long a table whose first publication failed or was refused waits before a
sweep tries it again (a compaction event tries it at once)."""
METADATA_LOG_KEPT = 20
"""Earlier metadata files listed in a new one's metadata log."""

Outcome = Literal["published", "expired", "unchanged", "disabled", "busy", "refused"]


class PublicationConflict(FirnError):
    """Someone moved the catalog pointer between our read and our compare-and-set."""


@dataclass(frozen=True)
class Publication:
    """What one call to ``publish`` did to one table."""

    table: str
    outcome: Outcome
    identifier: str = ""
    firn_snapshot: int = 0
    iceberg_snapshot: int | None = None
    sequence_number: int = 0
    metadata_location: str | None = None
    partitions_rewritten: int = 0
    bytes_written: int = 0
    lag_seconds: float | None = None
    """From the oldest Firn commit it shows that was not yet visible to now."""
    changed_outside: bool = False
    message: str = ""
    removed_files: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class _Plan:
    """What a publication writes and lists."""

    manifests: list[ManifestFile] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    """Publisher-owned files (relative) the new snapshot uses."""
    owners: list[str] = field(default_factory=list)
    """Reused delete manifests: the delete files they list live as long as they do."""
    rewritten: set[str] = field(default_factory=set)
    bytes: int = 0


class Publisher:
    """Publishes Firn tables into the SQL catalog in Firn's Postgres."""

    def __init__(
        self,
        conn: Connection,
        *,
        catalog: str = DEFAULT_CATALOG,
        io_properties: Mapping[str, str] | None = None,
    ) -> None:
        self.conn = conn
        self.catalog = catalog
        self.io_properties = dict(io_properties or {})

    # -- which tables ----------------------------------------------------------------

    def due(self) -> list[int]:
        """Tables whose published view is behind: never published (but not those whose
        first publication failed or was refused in the last
        ``UNPUBLISHED_RETRY_SECONDS``: a refused name stays refused until renamed),
        or a compaction, load or schema change since the last publication (producer
        commits alone do not change what is published), or a published snapshot
        replaced longer ago than its retention (it expires), or publication turned off
        but still listed."""
        publish = "coalesce((t.properties->>'iceberg.publish')::boolean, true)"
        rows = self.conn.execute(
            "SELECT t.table_id FROM catalog_table t "
            "LEFT JOIN iceberg_publication p ON p.table_id = t.table_id "
            f"WHERE (p.metadata_location IS NULL AND {publish} AND (p.error_at IS NULL "
            f"OR p.error_at < now() - make_interval(secs => {UNPUBLISHED_RETRY_SECONDS}))) "
            "OR (p.metadata_location IS NOT NULL AND (NOT " + publish + " OR EXISTS ("
            "SELECT 1 FROM snapshot s WHERE s.table_id = t.table_id "
            "AND s.snapshot_id > p.firn_snapshot AND s.kind <> 'commit') OR EXISTS ("
            "SELECT 1 FROM iceberg_snapshot a JOIN iceberg_snapshot b ON b.table_id = a.table_id "
            "AND b.sequence_number > a.sequence_number WHERE a.table_id = t.table_id "
            "AND b.published_at < now() - make_interval(secs => coalesce((t.properties->>"
            "'iceberg.snapshot-retention')::float, " + str(DEFAULT_RETENTION) + "))))) "
            "ORDER BY t.table_id"
        ).fetchall()
        return [int(tid) for (tid,) in rows]

    # -- one table -------------------------------------------------------------------

    def publish(self, table: str | int, *, force: bool = False) -> Publication:
        """Bring ``table``'s Iceberg table up to its newest snapshot (``force``: write
        a new Iceberg snapshot even when nothing changed). Raises ``ConfigError`` for a
        table that does not exist; a failure is also recorded for ``firn status``."""
        row = (
            table_with_id(self.conn, table)
            if isinstance(table, int)
            else table_named(self.conn, table)
        )
        if row is None:
            raise ConfigError(f"no table {table!r}")
        name = row.definition.name
        try:
            ident = iceberg_name(name)
        except ConfigError as exc:
            pointers.record_error(self.conn, row.table_id, self.catalog, None, str(exc))
            return Publication(name, "refused", message=str(exc))
        if not row.properties.iceberg_publish:
            dropped = pointers.drop(self.conn, row.table_id, self.catalog, ident)
            message = "iceberg.publish is false" + ("; withdrew it" if dropped else "")
            return Publication(name, "disabled", str(ident), message=message)
        owner, locked = self._lock(row.table_id, ident)
        if owner is not None and owner != row.table_id:
            if locked:
                self._unlock(row.table_id)
            message = (
                f"another Firn table (id {owner}) is published as {ident}; "
                "rename one of them or set iceberg.publish to false"
            )
            pointers.record_error(self.conn, row.table_id, self.catalog, None, message)
            return Publication(name, "refused", str(ident), message=message)
        if not locked:
            return Publication(name, "busy", str(ident), message="another publisher has it")
        try:
            for attempt in (1, 2):
                try:
                    return self._publish(row, ident, force)
                except OSError as exc:  # pyiceberg's file IO: say which table
                    raise StorageError(
                        f"cannot write the Iceberg table of {name!r} under {row.location}: {exc}"
                    ) from exc
                except PublicationConflict:
                    if attempt == 2:
                        raise
                    log.warning("%s: the Iceberg pointer moved under us; publishing again", name)
            raise AssertionError("unreachable")
        except Exception as exc:
            pointers.record_error(
                self.conn, row.table_id, self.catalog, ident, f"{type(exc).__name__}: {exc}"
            )
            raise
        finally:
            self._unlock(row.table_id)

    def _lock(self, table_id: int, ident: IcebergName) -> tuple[int | None, bool]:
        """The Firn table published as ``ident`` (None: none yet), and whether this
        publisher took the table's lock: one round trip for both."""
        got = self.conn.execute(
            "SELECT (SELECT table_id FROM iceberg_publication WHERE catalog_name = %s "
            "AND namespace = %s AND iceberg_name = %s), pg_try_advisory_lock(%s, %s)",
            (self.catalog, ident.namespace_text, ident.table, LOCK_CLASS, table_id),
        ).fetchone()
        assert got is not None
        return (None if got[0] is None else int(got[0])), bool(got[1])

    def _unlock(self, table_id: int) -> None:
        self.conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, table_id))

    def _io(self, location: str) -> FileIO:
        return load_file_io(self.io_properties, location)

    def _publish(self, row: TableRow, ident: IcebergName, force: bool) -> Publication:
        conn, tid, name = self.conn, row.table_id, row.definition.name
        snapshot = current_snapshot(conn, tid)
        mine = pointers.published(conn, tid)
        current = pointers.pointer(conn, self.catalog, ident)
        outside = current != (mine.metadata_location if mine else None)
        if outside:
            log.warning(
                "%s: the published Iceberg table %s was changed outside Firn (points at %s, "
                "Firn published %s); republishing it from Firn's catalog",
                name,
                ident,
                current,
                mine.metadata_location if mine else None,
            )
        since = mine.firn_snapshot if mine and not outside else 0
        waiting = _oldest_change(conn, tid, since, snapshot)
        if mine and not outside and not force and waiting is None:
            return self._expire(row, ident, mine)
        storage = Storage(row.location)
        location = file_uri(storage.root, PUBLISHED_DIR)
        io = self._io(location)
        base = _readable(io, current) or (_readable(io, mine.metadata_location) if mine else None)
        definition = definition_at(conn, tid, snapshot) if snapshot else row.definition
        schema = iceberg_schema(definition)
        spec = partition_spec(definition, schema)
        if base is not None and base.spec().fields != spec.fields:
            base = None  # not the table Firn publishes: start a new lineage over it
        files = files_at(conn, tid, snapshot) if snapshot else []
        sequence = base.next_sequence_number() if base is not None else 1
        snapshot_id = _new_snapshot_id(base)
        previous = (
            {}
            if base is None or outside or base.current_snapshot() is None
            else _manifests_by_partition(io, base)
        )
        plan = self._write_partitions(
            conn,
            tid,
            storage,
            io,
            location,
            definition,
            schema,
            spec,
            files,
            previous,
            snapshot_id,
            sequence,
        )
        manifest_list = f"{location}/metadata/snap-{snapshot_id}-{uuid.uuid4().hex[:12]}.avro"
        pointers.use_files(conn, tid, [_relative(storage, manifest_list)], sequence)
        parent = base.current_snapshot_id if base is not None else None
        with write_manifest_list(
            2, io.new_output(manifest_list), snapshot_id, parent, sequence, "deflate"
        ) as writer:
            writer.add_manifests(plan.manifests)
        plan.used.append(_relative(storage, manifest_list))
        plan.bytes += io.new_input(manifest_list).__len__()
        committed_at = waiting or _snapshot_time(conn, tid, snapshot)
        summary = _summary(conn, tid, snapshot, files, plan.manifests, committed_at)
        now_ms = int(time.time() * 1000)
        new_snapshot = Snapshot.model_validate(
            {
                "snapshot-id": snapshot_id,
                "parent-snapshot-id": parent,
                "sequence-number": sequence,
                "timestamp-ms": max(now_ms, base.last_updated_ms + 1 if base is not None else 0),
                "manifest-list": manifest_list,
                "summary": summary,
                "schema-id": schema.schema_id,
            }
        )
        metadata = _next_metadata(
            base,
            location,
            definition,
            schema,
            spec,
            new_snapshot,
            current,
            row.properties.iceberg_snapshot_retention,
            name,
        )
        metadata_path = f"{location}/metadata/{sequence:05d}-{uuid.uuid4()}.metadata.json"
        pointers.use_files(conn, tid, [_relative(storage, metadata_path)], sequence)
        ToOutputFile.table_metadata(metadata, io.new_output(metadata_path))
        plan.used.append(_relative(storage, metadata_path))
        plan.bytes += len(io.new_input(metadata_path))
        kept = [s.snapshot_id for s in metadata.snapshots]
        with conn.transaction():
            if not pointers.move_pointer(conn, self.catalog, ident, current, metadata_path):
                raise PublicationConflict(f"the Iceberg pointer of {ident} moved")
            pointers.record_publication(conn, tid, self.catalog, ident, metadata_path, snapshot)
            lag = pointers.record_snapshot(conn, tid, snapshot_id, snapshot, sequence, committed_at)
            pointers.forget_snapshots(conn, tid, kept)
            pointers.use_files(conn, tid, [*plan.used, *plan.owners], sequence)
            pointers.use_owned(conn, tid, plan.owners, sequence)
        removed = self._clean(tid, storage)
        log.info(
            "%s: published Firn snapshot %d as Iceberg snapshot %d of %s (%d partition(s) "
            "rewritten, %d bytes, lag %.1fs)",
            name,
            snapshot,
            snapshot_id,
            ident,
            len(plan.rewritten),
            plan.bytes,
            lag,
        )
        return Publication(
            name,
            "published",
            str(ident),
            firn_snapshot=snapshot,
            iceberg_snapshot=snapshot_id,
            sequence_number=sequence,
            metadata_location=metadata_path,
            partitions_rewritten=len(plan.rewritten),
            bytes_written=plan.bytes,
            lag_seconds=lag,
            changed_outside=outside and mine is not None,
            removed_files=removed,
        )

    def _expire(self, row: TableRow, ident: IcebergName, mine: pointers.Published) -> Publication:
        """Nothing new to publish: drop the snapshots replaced longer ago than
        ``iceberg.snapshot-retention`` (a quiet table's too, so Firn's expiry is not
        held back by them forever), with a new metadata file and no new snapshot."""
        conn, tid, name = self.conn, row.table_id, row.definition.name
        unchanged = Publication(name, "unchanged", str(ident), firn_snapshot=mine.firn_snapshot)
        storage = Storage(row.location)
        io = self._io(file_uri(storage.root, PUBLISHED_DIR))
        base = _readable(io, mine.metadata_location)
        if base is None or base.current_snapshot_id is None:
            return unchanged
        now_ms = int(time.time() * 1000)
        retention_ms = int(row.properties.iceberg_snapshot_retention * 1000)
        kept = _kept(base.snapshots, now_ms - retention_ms, base.current_snapshot_id)
        if len(kept) == len(base.snapshots):
            return unchanged
        ids = {s.snapshot_id for s in kept}
        sequence = base.next_sequence_number() - 1  # no new snapshot: the same number
        metadata = base.model_copy(
            update={
                "snapshots": kept,
                "refs": {k: v for k, v in base.refs.items() if v.snapshot_id in ids},
                "snapshot_log": [e for e in base.snapshot_log if e.snapshot_id in ids],
                "metadata_log": [
                    *base.metadata_log,
                    MetadataLogEntry.model_validate(
                        {
                            "metadata-file": mine.metadata_location,
                            "timestamp-ms": base.last_updated_ms,
                        }
                    ),
                ][-METADATA_LOG_KEPT:],
                "last_updated_ms": max(now_ms, base.last_updated_ms + 1),
            }
        )
        location = file_uri(storage.root, PUBLISHED_DIR)
        path = f"{location}/metadata/{sequence:05d}-{uuid.uuid4()}.metadata.json"
        pointers.use_files(conn, tid, [_relative(storage, path)], sequence)
        ToOutputFile.table_metadata(metadata, io.new_output(path))
        with conn.transaction():
            if not pointers.move_pointer(conn, self.catalog, ident, mine.metadata_location, path):
                raise PublicationConflict(f"the Iceberg pointer of {ident} moved")
            pointers.record_location(conn, tid, path)
            pointers.forget_snapshots(conn, tid, sorted(ids))
        removed = self._clean(tid, storage)
        log.info(
            "%s: expired %d Iceberg snapshot(s) of %s, deleted %d file(s)",
            name,
            len(base.snapshots) - len(kept),
            ident,
            removed,
        )
        return Publication(
            name,
            "expired",
            str(ident),
            firn_snapshot=mine.firn_snapshot,
            iceberg_snapshot=base.current_snapshot_id,
            sequence_number=sequence,
            metadata_location=path,
            removed_files=removed,
        )

    def _write_partitions(
        self,
        conn: Connection,
        tid: int,
        storage: Storage,
        io: FileIO,
        location: str,
        definition: TableSchema,
        schema: Schema,
        spec: PartitionSpec,
        files: Sequence[FileEntry],
        previous: Mapping[tuple[str, str], ManifestFile],
        snapshot_id: int,
        sequence: int,
    ) -> _Plan:
        """Each partition's data and delete manifests: the previous ones where nothing
        changed, new ones (with new delete files for new vectors) elsewhere."""
        by_partition: dict[str, list[FileEntry]] = defaultdict(list)
        for f in files:
            if f.store == "base":
                by_partition[f.partition_key].append(f)
        values = _partition_values(conn, tid, list(by_partition))
        plan = _Plan()

        def rewrite(
            path: str,
            added: list[DataFile],
            existing: list[ManifestEntry],
            removed: list[ManifestEntry],
        ) -> None:
            """Write partition ``key``'s new manifest at ``path`` into the plan."""
            manifest = self._manifest(
                tid, storage, io, path, spec, schema, snapshot_id, sequence,
                added, existing, removed, plan,
            )  # fmt: skip
            plan.manifests.append(manifest)
            plan.rewritten.add(key)

        for key, base_files in sorted(by_partition.items()):
            tag = partition_tag(key)
            partition = partition_record(definition, values[key])
            # Files lacking a defaulted column are published as rewritten copies (with
            # their vector applied); the rest are referenced in place.
            copied = [f for f in base_files if lacks_defaults(definition, f.schema_id)]
            base_files = [f for f in base_files if f not in copied]
            uris = {file_uri(storage.root, f.path): f for f in base_files}
            sources = {
                digest([f.path, f.deletion_vector.path if f.deletion_vector else ""]): f
                for f in copied
            }
            name = ManifestName(tag, "d", digest([*uris, *sources]))
            old = previous.get((tag, "d"))
            if old is not None and ManifestName.parse(old.manifest_path) == name:
                plan.manifests.append(old)
                plan.owners.append(_relative(storage, old.manifest_path))
            else:
                path = _manifest_path(location, name)
                owner = _relative(storage, path)
                listed = _entries(io, old)
                added = [
                    data_file(
                        uri,
                        partition,
                        f.record_count,
                        f.size_bytes,
                        key_bounds(definition, schema, f.min_key, f.max_key),
                    )
                    for uri, f in uris.items()
                    if uri not in listed
                ]
                kept_copies = {
                    _vector_digest(uri): e
                    for uri, e in listed.items()
                    if _vector_digest(uri) in sources and _relative_or_none(storage, uri)
                }
                for source, f in sources.items():
                    if source not in kept_copies:
                        added.append(
                            self._copy(
                                tid,
                                storage,
                                definition,
                                schema,
                                f,
                                partition,
                                sequence,
                                owner,
                                plan,
                            )
                        )
                existing = [e for uri, e in listed.items() if uri in uris]
                existing += list(kept_copies.values())
                pointers.use_files(
                    conn,
                    tid,
                    [_relative(storage, e.data_file.file_path) for e in kept_copies.values()],
                    sequence,
                    owner=owner,
                )
                keep = set(uris) | {e.data_file.file_path for e in kept_copies.values()}
                removed = [e for uri, e in listed.items() if uri not in keep]
                rewrite(path, added, existing, removed)
            vectors = {digest([f.deletion_vector.path]): f for f in base_files if f.deletion_vector}
            if not vectors:
                continue
            name = ManifestName(tag, "x", digest(vectors))
            old = previous.get((tag, "x"))
            if old is not None and ManifestName.parse(old.manifest_path) == name:
                plan.manifests.append(old)
                plan.owners.append(_relative(storage, old.manifest_path))
                continue
            path = _manifest_path(location, name)
            owner = _relative(storage, path)
            prior: dict[str, list[ManifestEntry]] = defaultdict(list)
            for entry in _entries(io, old).values():
                prior[_deleted_from(entry)].append(entry)
            added, existing, removed = [], [], []
            for vector_digest, f in vectors.items():
                assert f.deletion_vector is not None
                data_uri = file_uri(storage.root, f.path)
                before = prior.pop(data_uri, [])
                if any(_vector_digest(e.data_file.file_path) == vector_digest for e in before):
                    existing += before  # the vector has not changed since
                    continue
                positions = read_positions(storage, f.deletion_vector, f.record_count)
                shown = _positions(storage, before)
                if np.isin(shown, positions, assume_unique=True).all():
                    # A vector only grows: publish the rows it hides now and did not
                    # then, next to the delete files already published for the file.
                    existing += before
                    positions = np.setdiff1d(positions, shown, assume_unique=True)
                else:
                    removed += before
                if len(positions) == 0:
                    continue  # a new vector file hiding the same rows
                relative = delete_file_name(f.deletion_vector.path)
                pointers.use_files(conn, tid, [relative], sequence, owner=owner)
                deletes = write_position_deletes(
                    storage,
                    relative,
                    file_uri(storage.root, relative),
                    data_uri,
                    positions,
                    partition,
                )
                plan.bytes += deletes.file_size_in_bytes
                added.append(deletes)
            for gone in prior.values():
                removed += gone
            pointers.use_files(
                conn,
                tid,
                [_relative(storage, e.data_file.file_path) for e in existing],
                sequence,
                owner=owner,
            )
            rewrite(path, added, existing, removed)
        return plan

    def _copy(
        self,
        table_id: int,
        storage: Storage,
        definition: TableSchema,
        schema: Schema,
        f: FileEntry,
        partition: Record,
        sequence: int,
        owner: str,
        plan: _Plan,
    ) -> DataFile:
        """Publish a rewritten copy of base file ``f``: its live rows in the current
        schema (defaults filled in, hidden rows left out)."""
        relative = copy_name(f.path, f.deletion_vector.path if f.deletion_vector else None)
        pointers.use_files(self.conn, table_id, [relative], sequence, owner=owner)
        rows = scan_base(storage, definition, [f])
        size = storage.write_parquet(relative, rows)
        plan.bytes += size
        return data_file(
            file_uri(storage.root, relative),
            partition,
            rows.num_rows,
            size,
            key_bounds(definition, schema, f.min_key, f.max_key),
        )

    def _manifest(
        self,
        table_id: int,
        storage: Storage,
        io: FileIO,
        path: str,
        spec: PartitionSpec,
        schema: Schema,
        snapshot_id: int,
        sequence: int,
        added: list[Any],
        existing: list[ManifestEntry],
        removed: list[ManifestEntry],
        plan: _Plan,
    ) -> ManifestFile:
        relative = _relative(storage, path)
        pointers.use_files(self.conn, table_id, [relative], sequence)
        manifest = write_manifest(io, path, spec, schema, snapshot_id, added, existing, removed)
        plan.used.append(relative)
        plan.bytes += manifest.manifest_length
        return manifest

    def _clean(self, table_id: int, storage: Storage) -> int:
        """Delete the publisher's files no retained snapshot uses (storage first, then
        the rows: a crash in between deletes them again)."""
        unused = pointers.unused_files(self.conn, table_id)
        for path in unused:
            storage.delete(path)
        if unused:
            pointers.forget_files(self.conn, table_id, unused)
        return len(unused)


def _oldest_change(conn: Connection, table_id: int, after: int, upto: int) -> dt.datetime | None:
    """When the oldest change to the published view in (after, upto] was committed."""
    row = conn.execute(
        "SELECT min(created_at) FROM snapshot WHERE table_id = %s AND snapshot_id > %s "
        "AND snapshot_id <= %s AND kind <> 'commit'",
        (table_id, after, upto),
    ).fetchone()
    return None if row is None else row[0]


def _snapshot_time(conn: Connection, table_id: int, snapshot: int) -> dt.datetime:
    row = conn.execute(
        "SELECT coalesce((SELECT created_at FROM snapshot WHERE table_id = %s "
        "AND snapshot_id = %s), now())",
        (table_id, snapshot),
    ).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def _partition_values(
    conn: Connection, table_id: int, keys: Sequence[str]
) -> dict[str, dict[str, str]]:
    rows = conn.execute(
        "SELECT partition_key, partition_values FROM catalog_partition "
        "WHERE table_id = %s AND partition_key = ANY(%s)",
        (table_id, list(keys)),
    ).fetchall()
    return {str(key): dict(values) for key, values in rows}


def _readable(io: FileIO, location: str | None) -> TableMetadata | None:
    if location is None:
        return None
    try:
        return FromInputFile.table_metadata(io.new_input(location))
    except Exception as exc:  # any unreadable or foreign file: publish a new lineage
        log.warning("cannot read Iceberg metadata %s (%s); starting anew", location, exc)
        return None


def _manifests_by_partition(
    io: FileIO, metadata: TableMetadata
) -> dict[tuple[str, str], ManifestFile]:
    current = metadata.current_snapshot()
    found: dict[tuple[str, str], ManifestFile] = {}
    if current is None:
        return found
    for manifest in current.manifests(io):
        name = ManifestName.parse(manifest.manifest_path)
        if name is not None:
            found.setdefault((name.partition, name.content), manifest)
    return found


def _entries(io: FileIO, manifest: ManifestFile | None) -> dict[str, ManifestEntry]:
    if manifest is None:
        return {}
    return {e.data_file.file_path: e for e in manifest.fetch_manifest_entry(io)}


def _manifest_path(location: str, name: ManifestName) -> str:
    return f"{location}/metadata/{name.stem()}-{uuid.uuid4().hex[:12]}.avro"


def _deleted_from(entry: ManifestEntry) -> str:
    """The data file a position delete file of ours applies to (its file_path bound)."""
    bound = (entry.data_file.lower_bounds or {}).get(FILE_PATH_ID)
    return bound.decode() if bound else ""


def _positions(storage: Storage, entries: Sequence[ManifestEntry]) -> npt.NDArray[np.int64]:
    """Every position the delete files ``entries`` hide, ascending."""
    if not entries:
        return np.empty(0, np.int64)
    parts = [
        storage.read_parquet(_relative(storage, e.data_file.file_path), ["pos"])
        .column("pos")
        .to_numpy()
        for e in entries
    ]
    return np.sort(np.concatenate(parts)).astype(np.int64)


def _relative_or_none(storage: Storage, uri: str) -> str | None:
    """``uri`` relative to the table when it is a copy the publisher wrote."""
    prefix = file_uri(storage.root, COPIES_DIR) + "/"
    return uri[len(file_uri(storage.root, "")) + 1 :] if uri.startswith(prefix) else None


def _vector_digest(delete_uri: str) -> str:
    return delete_uri.rsplit("/", 1)[-1].split("-", 1)[0]


def _relative(storage: Storage, uri: str) -> str:
    prefix = file_uri(storage.root, "") + "/"
    if not uri.startswith(prefix):
        raise ConfigError(f"{uri} is not under the table's location {storage.root}")
    return uri[len(prefix) :]


def _new_snapshot_id(base: TableMetadata | None) -> int:
    taken = {s.snapshot_id for s in base.snapshots} if base is not None else set()
    while True:
        candidate = secrets.randbits(62) + 1
        if candidate not in taken:
            return candidate


def _summary(
    conn: Connection,
    table_id: int,
    snapshot: int,
    files: Sequence[FileEntry],
    manifests: Sequence[ManifestFile],
    committed_at: dt.datetime,
) -> Summary:
    base = [f for f in files if f.store == "base"]
    merged = merged_seqs_at(conn, table_id, snapshot) if snapshot else {}
    partitions = {f.partition_key for f in files}
    folded = [merged.get(p, 0) for p in partitions] or [0]
    row = conn.execute(
        "SELECT seq FROM snapshot WHERE table_id = %s AND snapshot_id <= %s AND kind = 'commit' "
        "ORDER BY snapshot_id DESC LIMIT 1",
        (table_id, snapshot),
    ).fetchone()
    deletes = [m for m in manifests if m.content.value == 1]
    return Summary(
        Operation.OVERWRITE,
        **{
            "firn.snapshot": str(snapshot),
            "firn.seq": str(int(row[0]) if row and row[0] is not None else 0),
            "firn.merged-seq-min": str(min(folded)),
            "firn.merged-seq-max": str(max(folded)),
            "firn.committed-at": committed_at.isoformat(),
            "total-data-files": str(len(base)),
            "total-records": str(sum(f.record_count for f in base)),
            "total-files-size": str(sum(f.size_bytes for f in base)),
            "total-delete-files": str(
                sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in deletes)
            ),
            "total-position-deletes": str(
                sum(f.deletion_vector.rows for f in base if f.deletion_vector)
            ),
            "total-equality-deletes": "0",
        },
    )


def _next_metadata(
    base: TableMetadata | None,
    location: str,
    definition: TableSchema,
    schema: Schema,
    spec: PartitionSpec,
    snapshot: Snapshot,
    current_location: str | None,
    retention_seconds: float,
    firn_name: str,
) -> TableMetadata:
    retention_ms = int(retention_seconds * 1000)
    properties = {
        "firn.table": firn_name,
        "history.expire.max-snapshot-age-ms": str(max(1, retention_ms)),
        "history.expire.min-snapshots-to-keep": "1",
        "write.parquet.compression-codec": "zstd",
    }
    if base is None:
        base = TableMetadataV2.model_validate(
            {
                "location": location,
                "table-uuid": uuid.uuid4(),
                "last-updated-ms": snapshot.timestamp_ms,
                "last-column-id": max(definition.last_column_id, schema.highest_field_id),
                "schemas": [schema],
                "current-schema-id": schema.schema_id,
                "partition-specs": [spec],
                "default-spec-id": spec.spec_id,
                "last-partition-id": FIRST_PARTITION_FIELD_ID + len(spec.fields) - 1,
                "sort-orders": [UNSORTED_SORT_ORDER],
                "default-sort-order-id": UNSORTED_SORT_ORDER.order_id,
                "properties": properties,
            }
        )
        current_location = None
    schemas = list(base.schemas)
    known = {s.schema_id for s in schemas}
    for version in sorted(definition.versions()):
        if version not in known:
            schemas.append(iceberg_schema(definition, version))
    snapshots = [*base.snapshots, snapshot]
    kept = _kept(snapshots, snapshot.timestamp_ms - retention_ms, snapshot.snapshot_id)
    kept_ids = {s.snapshot_id for s in kept}
    metadata_log = list(base.metadata_log)
    if current_location is not None:
        metadata_log.append(
            MetadataLogEntry.model_validate(
                {"metadata-file": current_location, "timestamp-ms": base.last_updated_ms}
            )
        )
    return base.model_copy(
        update={
            "schemas": schemas,
            "current_schema_id": schema.schema_id,
            "last_column_id": max(base.last_column_id, definition.last_column_id),
            "snapshots": kept,
            "current_snapshot_id": snapshot.snapshot_id,
            "refs": {
                **{k: v for k, v in base.refs.items() if v.snapshot_id in kept_ids},
                MAIN_BRANCH: SnapshotRef.model_validate(
                    {"snapshot-id": snapshot.snapshot_id, "type": SnapshotRefType.BRANCH}
                ),
            },
            "snapshot_log": [
                *(e for e in base.snapshot_log if e.snapshot_id in kept_ids),
                SnapshotLogEntry.model_validate(
                    {"snapshot-id": snapshot.snapshot_id, "timestamp-ms": snapshot.timestamp_ms}
                ),
            ],
            "metadata_log": metadata_log[-METADATA_LOG_KEPT:],
            "last_sequence_number": snapshot.sequence_number,
            "last_updated_ms": snapshot.timestamp_ms,
            "properties": {**base.properties, **properties},
        }
    )


def _kept(snapshots: Sequence[Snapshot], cutoff_ms: int, current: int) -> list[Snapshot]:
    """The current snapshot and every one replaced at or after ``cutoff_ms`` (a snapshot
    is replaced when the next one is made)."""
    ordered = sorted(snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    kept = []
    for i, snap in enumerate(ordered):
        replaced = ordered[i + 1].timestamp_ms if i + 1 < len(ordered) else None
        if snap.snapshot_id == current or replaced is None or replaced >= cutoff_ms:
            kept.append(snap)
    return kept
