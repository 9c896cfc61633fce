"""The metrics service's handlers, free of Faust so they can be tested alone.

Two steps, with a Kafka topic between them (see app.py): ``fan_out`` turns a commit
event into one *update* per partition it touched and a compaction event into a
catalog reading of the compacted partition; ``apply_update`` folds a partition's
updates into its ``TrackedPartition`` and says whether a plan request is due. The
periodic check sends a reading of every partition through the same path.

An update is a JSON object for one partition:
``{"kind": "commit", ..., "increment": {...}}`` or
``{"kind": "reading", ..., "reading": {...}}``. A message on the updates topic holds
one table's updates, a JSON list keyed ``table_id`` (``message_key``): a commit of
four partitions is one message, not four, and every update of a partition still
lands on one Kafka partition, in order.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from typing import Any

import firn
from firn.catalog.event_rows import commit_named, compaction_named
from firn.catalog.metrics import TableRead, change_stamp, changed_partitions, partition_states_of
from firn.catalog.tables import properties_of
from firn.engine.tracking import Increment, Reading, Request, TrackedPartition
from firn.events.commits import CommitEvent
from firn.events.compactions import CompactionEvent
from firn.events.plans import PlanRequestEvent
from firn.events.wire import UnhandledEventError
from firn.model.properties import TableProperties
from firn.model.triggers import PartitionMetrics
from firn.observability.instruments import COMMITTED_BYTES

log = logging.getLogger(__name__)

Update = dict[str, Any]


def update_key(table_id: int, partition_key: str) -> str:
    """The partition's key in the Faust table."""
    return f"{table_id}/{partition_key}"


def message_key(table_id: int) -> str:
    """The key of a message of the table's updates on the updates topic."""
    return str(table_id)


def table_partition(table: str, partitions: int) -> int:
    """The Kafka partition a table's commit events land on, and the one its other
    updates are sent to: librdkafka's default partitioner (``consistent_random``)
    for a message keyed by the table's name, CRC-32 of the key modulo the partition
    count (``tests/integration/test_metrics_service.py`` holds the two together on
    the broker). A commit event found on it is tracked where it lands; one a foreign
    partitioner put elsewhere is sent on to this partition of the updates topic."""
    return zlib.crc32(table.encode()) % partitions


def partition_of(update: Update) -> str:
    """The key of the update's partition in the Faust table."""
    return update_key(update["table_id"], update["partition_key"])


def table_of(update: Update) -> int:
    return int(update["table_id"])


def grouped_by(updates: list[Update], key: Callable[[Update], Any]) -> dict[Any, list[Update]]:
    """``updates`` grouped by ``key``, the groups in the order each first appears and
    each group's updates in their order (a partition's updates must apply in order)."""
    grouped: dict[Any, list[Update]] = {}
    for update in updates:
        grouped.setdefault(key(update), []).append(update)
    return grouped


MESSAGE_UPDATES = 256
"""Most updates one message carries: a reading is a few hundred bytes, and a periodic
check reads every partition of a table, which may be thousands (Kafka's default
message limit is 1 MiB)."""


def update_messages(found: list[Update]) -> list[tuple[str, str, list[Update]]]:
    """``found`` as messages of one table's updates each (its key, its table's name,
    its updates), at most ``MESSAGE_UPDATES`` a message."""
    grouped = grouped_by(found, table_of)
    return [
        (message_key(table_id), updates[0]["table"], updates[start : start + MESSAGE_UPDATES])
        for table_id, updates in grouped.items()
        for start in range(0, len(updates), MESSAGE_UPDATES)
    ]


def parse_updates(value: bytes | None) -> list[Update]:
    """The updates of a message read back from the updates topic: a list of them, or
    one (as sent before updates were grouped per table). ``UnhandledEventError`` when
    it is not that: the topic is internal, but a message there must never stop the
    agent."""
    try:
        found = json.loads(value or b"")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UnhandledEventError(f"metrics update is not JSON: {exc}") from exc
    if isinstance(found, dict):
        return [_checked(found)]
    if not isinstance(found, list) or not found:
        raise UnhandledEventError("metrics updates are not a JSON object or a non-empty list")
    return [_checked(update) for update in found]


def _checked(update: Any) -> Update:
    if not isinstance(update, dict):
        raise UnhandledEventError("metrics update is not a JSON object")
    expected = {"commit": "increment", "reading": "reading"}
    body = expected.get(update.get("kind"))  # type: ignore[arg-type]
    shape = [
        (body is not None, "kind 'commit' or 'reading'"),
        (isinstance(update.get("table"), str), "a table name"),
        (type(update.get("table_id")) is int, "an integer table_id"),
        (isinstance(update.get("partition_key"), str), "a partition_key"),
        (body is not None and isinstance(update.get(body), dict), f"a {body} object"),
    ]
    missing = [what for ok, what in shape if not ok]
    if missing:
        raise UnhandledEventError(f"metrics update lacks {', '.join(missing)}")
    return update


def _update(kind: str, table: str, table_id: int, partition_key: str) -> Update:
    return {"kind": kind, "table": table, "table_id": table_id, "partition_key": partition_key}


def apply_update(
    state: Mapping[str, Any] | None,
    updates: list[Update],
    properties: TableProperties,
    now: float,
    resend_after: float,
) -> tuple[TrackedPartition, Request | None]:
    """The partition after ``updates`` (in order), and the plan request to send if
    one is due."""
    first = updates[0]
    tracked = (
        TrackedPartition.from_dict(state)
        if state is not None and state["table_id"] == first["table_id"]
        else TrackedPartition(first["table"], first["table_id"], first["partition_key"])
    )
    changed = False
    for update in updates:
        if update["kind"] == "commit":
            changed |= tracked.apply_commit(Increment(**update["increment"]))
        else:
            reading = dict(update["reading"])
            reading["metrics"] = PartitionMetrics(**reading["metrics"])
            changed |= tracked.apply_reading(Reading(**reading))
    if not changed:
        return tracked, None  # a duplicate, late or older event: already counted
    return tracked, tracked.request(properties, now, resend_after)


def needs_first_reading(state: Mapping[str, Any] | None, update: Mapping[str, Any]) -> bool:
    """A commit to a partition never read from the catalog: read it first, or the
    counters would start from zero (a partition with history looks empty, one
    compacted an hour ago looks never compacted)."""
    return update["kind"] == "commit" and (state is None or state["read_snapshot"] == 0)


def plan_request_event(tracked: TrackedPartition, request: Request) -> PlanRequestEvent:
    return PlanRequestEvent(
        table=tracked.table,
        table_id=tracked.table_id,
        partition_key=tracked.partition_key,
        kind=request.kind,  # type: ignore[arg-type]  # a Kind value
        max_seq=request.max_seq,
        score=request.score,
        reasons=list(request.reasons),
    )


class CatalogReader:
    """Readings and table properties from the catalog, for the async side to call in
    a worker thread. Properties are cached for ``ttl`` seconds and reloaded at every
    periodic check, so a changed threshold takes effect at the next check at the
    latest."""

    def __init__(self, connect: Callable[[], firn.Catalog], ttl: float) -> None:
        self._connect = connect
        self._catalog: firn.Catalog | None = None
        self.ttl = ttl
        self._lock = threading.Lock()
        self._properties: dict[int, tuple[float, TableProperties]] = {}

    @property
    def catalog(self) -> firn.Catalog:
        """The open catalog; a lost connection is replaced on the next call."""
        if self._catalog is not None and (self._catalog.conn.closed or self._catalog.conn.broken):
            self._catalog.close()
            self._catalog = None
        if self._catalog is None:
            self._catalog = self._connect()
        return self._catalog

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def cached_properties(self, table_id: int) -> TableProperties | None:
        """The table's properties if loaded less than ``ttl`` ago (None: load them
        with ``properties``): no catalog call and no lock (a dict lookup is atomic,
        and the lock may be held through a long catalog read), so the event loop may
        ask."""
        cached = self._properties.get(table_id)
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        return None

    def properties(self, table: str, table_id: int) -> TableProperties | None:
        """The table's properties; None if it no longer exists."""
        cached = self.cached_properties(table_id)
        if cached is not None:
            return cached
        with self._lock:
            found = properties_of(self.catalog.conn, [table_id]).get(table_id)
        if found is None or found[0] != table:
            return None  # dropped, or the id now names another table
        self._properties[table_id] = (time.monotonic(), found[1])
        return found[1]

    def readings(
        self, table: str, table_id: int, partition_keys: Collection[str] | None = None
    ) -> list[Update]:
        """A reading update for each partition of the table (or of ``partition_keys``)."""
        properties = self.properties(table, table_id)
        if properties is None:
            return []
        return self._readings({table_id: (table, properties)}, {table_id: partition_keys})

    def _readings(
        self,
        tables: Mapping[int, tuple[str, TableProperties]],
        keys: Mapping[int, Collection[str] | None],
    ) -> list[Update]:
        """Reading updates of the ``tables`` (id: name and properties), each of its
        partitions ``keys`` names (None: all), a few hundred tables a statement."""
        reads = [TableRead(tid, props, keys.get(tid)) for tid, (_, props) in tables.items()]
        with self._lock:
            found = partition_states_of(self.catalog.conn, reads)
        updates = []
        for table_id, states in found.items():
            table = tables[table_id][0]
            for key, state in states.items():
                update = _update("reading", table, table_id, key)
                update["reading"] = {
                    "snapshot_id": state.snapshot_id,
                    "metrics": dataclasses.asdict(state.metrics),
                    "max_seq": state.max_seq,
                    "max_merged_seq": state.max_merged_seq,
                    "last_major_at": state.last_major_at,
                    "last_plan": state.last_plan,
                    "oldest_change_at": state.oldest_change_at,
                }
                updates.append(update)
        return updates

    def _tables(self, table_ids: Collection[int] | None) -> dict[int, tuple[str, TableProperties]]:
        """Name and properties of these tables (None: all), loaded afresh and cached."""
        with self._lock:
            tables = properties_of(
                self.catalog.conn, None if table_ids is None else sorted(table_ids)
            )
            now = time.monotonic()
            for table_id, (_, properties) in tables.items():
                self._properties[table_id] = (now, properties)
        return tables

    def commit_updates(self, commit: CommitEvent) -> list[Update]:
        """One update per partition the commit an event names touched, counted from
        the catalog's rows of that snapshot, not from the event (``ConfigError`` if the
        event is invalid, ``EventMismatchError`` if it disagrees with the catalog)."""
        with self._lock:
            added = commit_named(self.catalog.conn, commit)
        updates = []
        for files in added:
            increment = Increment(
                snapshot_id=commit.snapshot_id,
                seq=commit.seq,
                insert_bytes=files.insert_bytes,
                delete_bytes=files.delete_bytes,
                insert_files=files.insert_files,
                delete_files=files.delete_files,
                committed_at=commit.committed_at.timestamp(),
            )
            update = _update("commit", commit.table, commit.table_id, files.partition_key)
            update["increment"] = dataclasses.asdict(increment)
            updates.append(update)
        COMMITTED_BYTES.labels(commit.table).inc(
            sum(f.insert_bytes + f.delete_bytes for f in added)
        )
        return updates

    def compaction_readings(self, compaction: CompactionEvent) -> list[Update]:
        """The compacted partition's reading (``ConfigError`` if the event is invalid,
        ``EventMismatchError`` if it names no plan committed as that snapshot)."""
        with self._lock:
            compaction_named(self.catalog.conn, compaction)
        return self.readings(compaction.table, compaction.table_id, [compaction.partition_key])

    def changed_readings(self, since: int) -> tuple[list[Update], int]:
        """Readings of what changed after stamp ``since`` (``changed_partitions``), and
        the stamp the next check starts from. Each table read has its properties
        loaded afresh."""
        with self._lock:
            changes = changed_partitions(self.catalog.conn, since)
        tables = self._tables(list(changes.partitions))
        return self._readings(tables, changes.partitions), changes.high_water

    def change_stamp(self) -> int:
        """The newest change stamp handed out (a full check reads everything up to it)."""
        with self._lock:
            return change_stamp(self.catalog.conn)

    def all_readings(self) -> list[Update]:
        """A reading of every partition of every table: the periodic check. Each
        table's properties are loaded afresh on the way."""
        tables = self._tables(None)
        return self._readings(tables, dict.fromkeys(tables))
