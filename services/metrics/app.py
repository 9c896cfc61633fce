"""The metrics Faust app (design §4), built from settings, never at import time.

Two agents. Every update of one table lands on one Kafka partition, its table's
(``table_partition``: where librdkafka's default partitioner puts a message keyed by
the table's name), so the Faust table (and its changelog) stays partitioned the same
way when several metrics workers share the load:

- ``track`` reads firn.commits and the updates topic, co-partitioned, a few events
  at a time (one thread hop for their catalog reads). A commit event
  is decoded once and its increments (one per partition it touched, counted from
  the catalog) are folded in where the event landed: no trip through the updates
  topic, which was the dearest part of a commit event (issue 37). A commit event a
  foreign partitioner put on another partition is sent on to its table's partition
  of the updates topic instead. Each partition's updates are folded into its entry
  in the ``partitions`` table (keyed ``table_id/partition``; its changelog goes to
  the message's Kafka partition), and a plan request goes to firn.plan-requests when
  the triggers fire.
- ``fan_out`` reads firn.compactions (keyed by partition, so on any Kafka
  partition), a few events at a time, and sends a fresh catalog reading of each
  compacted partition to its table's partition of the updates topic.

Invalid events go to firn.dlq with the reason.

A timer (on the leader) and a start-up task send a reading of every partition
through the same path: lost commit events, restarts and time-based triggers are
made good there.

The app reaches Kafka as the other services do (``kafka_access``: the security
pass-through, idempotent acks=all producers), and its own topics (the table's
changelog, the assignor's) take the configured partitions and replication.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, cast

import faust
import faust.streams as faust_streams
from tenacity import AsyncRetrying

from firn.events.wire import UnhandledEventError, as_event, decode
from firn.kafka import Topics
from firn.kafka.clients import SESSION_TIMEOUT_MS
from firn.kafka.parking import DeadLetterDesk
from firn.model.properties import TableProperties
from firn.postgres.retry import is_transient, transient_retries
from firn.settings import FirnSettings
from firn_services.metrics.handlers import (
    CatalogReader,
    Update,
    apply_update,
    grouped_by,
    needs_first_reading,
    parse_updates,
    partition_of,
    plan_request_event,
    table_of,
    table_partition,
    update_messages,
)
from firn_services.metrics.kafka_access import IdempotentTransport, broker_credentials

log = logging.getLogger(__name__)


TABLE = "partitions"
"""The Faust table of tracked partitions."""

METADATA_MAX_AGE_SECONDS = 30.0
"""How old the worker's Kafka metadata may grow before it is asked for again."""


FAN_OUT_BATCH = 64
"""Most compaction events ``fan_out`` takes at a time."""

FAN_OUT_WITHIN = 0.02
"""Longest ``fan_out`` waits for more events before handling those it has (seconds):
a compacted partition's reading is this much later at most."""


TRACK_BATCH = 64
"""Most events ``track`` takes at a time."""

TRACK_WITHIN = 0.02
"""Longest ``track`` waits for more events before tracking those it has (seconds): a
due partition's plan request is this much later at most."""

PRODUCER_LINGER = 0.005
"""How long the app's producer gathers messages before a produce request (seconds):
the Faust table's changelog takes a message per partition a commit touched, and one
request per few of them instead of per message costs the service and the broker less
(issue 37: with ``track``'s batches, 13-24 % less CPU per commit event in
``bench/README.md``); a plan request is this much later at most."""


FULL_CHECK_EVERY = 10
"""Every this many periodic checks, one reads every partition (the others read what
changed since the check before the last)."""


def changelog_topic(settings: FirnSettings) -> str:
    """The Faust table's changelog topic, as Faust names it: ``<app id>-<table>-changelog``."""
    return f"{settings.topic_prefix}metrics-{TABLE}-changelog"


def create_app(
    settings: FirnSettings,
    reader: CatalogReader,
    *,
    on_timer: Callable[[], Awaitable[None]] | None = None,
) -> faust.App:
    topics = Topics.from_settings(settings)
    datadir = settings.home / "metrics"
    datadir.mkdir(parents=True, exist_ok=True)  # Faust creates only the last level
    # The updates topic and the table's changelog must have as many partitions as
    # each other (Faust checks); the updates topic is created with the others.
    partition_count = settings.topic_partitions
    app = faust.App(
        f"{settings.topic_prefix}metrics",
        broker=f"kafka://{settings.kafka_servers()}",
        broker_credentials=broker_credentials(settings),
        store="memory://",  # the table is rebuilt from its changelog topic on start
        datadir=str(datadir),
        web_enabled=False,
        topic_partitions=partition_count,
        topic_replication_factor=settings.topic_replication,
        # Offsets are committed by Faust only after the agent has processed the event.
        broker_commit_every=100,
        broker_commit_interval=1.0,
        # aiokafka asks again for a topic its metadata lacks only at this age (five
        # minutes by default): see changelog_known.
        consumer_metadata_max_age_ms=int(METADATA_MAX_AGE_SECONDS * 1000),
        # As for the other services' consumers (firn.kafka.clients): a killed metrics
        # process would hold its partitions for Faust's 60 s default; the catalog work
        # runs on threads (_retrying), so the loop's heartbeats are not held up.
        broker_session_timeout=SESSION_TIMEOUT_MS / 1000,
        # No member keeps a standby copy of another's partitions: with two members
        # each replayed the other's changelog, which cost the pair 15 % more CPU and
        # doubled the fleet's due partitions (bench/fleet.py --members 2). A member
        # handed a partition rebuilds it from the compacted changelog, as at start.
        table_standby_replicas=0,
        producer_linger=PRODUCER_LINGER,
    )
    app.transport = IdempotentTransport(app.conf.broker_consumer, app)
    source = app.topic(topics.compactions, value_serializer="raw")
    # Raw values, decoded in the agent: a message Faust cannot decode must be parked,
    # not crash the agent (the topic is internal, but anyone with access can write it).
    updates = app.topic(
        topics.metrics_updates,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partition_count,
    )
    # What ``track`` reads: commit events, tracked where they land, and the updates
    # topic, which the three topics' co-partitioning keeps on the same member.
    tracked = app.topic(
        topics.commits, topics.metrics_updates, key_serializer="raw", value_serializer="raw"
    )
    plan_requests = app.topic(topics.plan_requests, value_serializer="raw")
    dlq = app.topic(topics.dlq, value_serializer="raw")
    insync = {"min.insync.replicas": str(settings.min_insync_replicas())}
    partitions = app.Table(
        TABLE,
        default=None,
        partitions=partition_count,
        extra_topic_configs=insync if settings.topic_replication > 1 else None,
    )
    # A request no compaction answered is sent again after this long: it was lost, or
    # its plan failed. Not sooner: a plan may simply still be queued or running.
    resend_after = max(2 * settings.metrics_check_interval, 60.0)

    async def send_updates(found: list[Update]) -> None:
        # One message per table, all sent before any acknowledgement is awaited (a
        # message per partition made the metrics service the dearest part of a
        # fleet's commit, issue 37), each to its table's partition
        # (``table_partition``), where its commit events land: the table's entries
        # and their changelog stay on one partition.
        await _all_delivered(
            updates,
            [
                {
                    "key": key.encode(),
                    "value": json.dumps(batch).encode(),
                    "partition": table_partition(table, partition_count),
                }
                for key, table, batch in update_messages(found)
            ],
        )

    desk = DeadLetterDesk("metrics", topics.dlq)

    async def park(event: Any, exc: BaseException) -> None:
        """A bounded dead letter for the event (the desk the consume loop uses); if
        even that is refused, the event is skipped, logged and counted: no message may
        stop the agent."""
        message = event.message
        source = (message.topic, message.partition, message.offset)
        letter = desk.letter(source, event.key, event.value, exc)
        try:
            await _delivered(dlq, key=letter.key, value=letter.value, headers=dict(letter.headers))
            desk.parked(exc)
        except Exception as refused:
            desk.refused(source, repr(refused))

    # As the consume loop of the other services dispatches (firn.kafka.loop): decoded,
    # its handler looked up by type, read as its model from the one registry. The
    # reader's methods are looked up per event (an app may be built without one).
    handlers: dict[str, Callable[[Any], list[Update]]] = {
        "commit": lambda commit: reader.commit_updates(commit),
        "compaction": lambda compaction: reader.compaction_readings(compaction),
    }

    def handler_and_model(event: Any) -> tuple[Callable[[Any], list[Update]], Any]:
        """The event decoded, its handler looked up by type and the event read as its
        model; what is wrong with it raised (and the event parked by the caller)."""
        raw = decode(event.value)
        handler = handlers.get(raw["event_type"])
        if handler is None:
            raise UnhandledEventError(f"no handler for event type {raw['event_type']!r}")
        return handler, as_event(raw)

    def handle_all(decoded: list[tuple[Any, Any]]) -> list[list[Update] | Exception]:
        """Each event's updates, or what made it invalid; on one thread, so a batch
        costs one hop to it. Database weather is raised: the batch is tried again."""
        outcomes: list[list[Update] | Exception] = []
        for handler, model in decoded:
            try:
                outcomes.append(handler(model))
            except Exception as exc:
                if is_transient(exc):
                    raise
                outcomes.append(exc)
        return outcomes

    async def fan_out(stream: faust.StreamT[Any]) -> None:
        # Events a few at a time (as many as came within FAN_OUT_WITHIN): one thread
        # hop for their catalog reads, and their updates sent before any
        # acknowledgement is awaited. Faust acknowledges a batch once this body has
        # finished with it, so every update is durable first.
        # (take_events is the Stream's, not on the StreamT protocol an agent is typed with.)
        taking = cast(faust.Stream[Any], stream).take_events
        async for batch in taking(FAN_OUT_BATCH, within=FAN_OUT_WITHIN):
            decoded, sources = [], []
            for event in batch:
                try:
                    decoded.append(handler_and_model(event))
                    sources.append(event)
                except Exception as exc:  # a Faust agent that raises stops the worker
                    await park(event, exc)
            if not decoded:
                continue
            found: list[Update] = []
            for event, outcome in zip(sources, await _retrying(handle_all, decoded), strict=True):
                if isinstance(outcome, Exception):
                    await park(event, outcome)
                else:
                    found += outcome
            await send_updates(found)

    def lands_where_tracked(event: Any, table: str) -> bool:
        """Whether a commit event sits on its table's partition of a commits topic
        partitioned as the table's changelog is: then its updates are tracked where it
        landed, with no trip through the updates topic (the dearest part of a commit
        event's cost). A foreign partitioner, or a commits topic of another partition
        count, sends them the long way."""
        return (
            event.message.partition == table_partition(table, partition_count)
            and app.consumer.topic_partitions(topics.commits) == partition_count
        )

    async def track(stream: faust.StreamT[Any]) -> None:
        # Events a few at a time, as fan_out takes them: the commit events' catalog
        # reads share one thread hop, and each event is then tracked in its order (a
        # partition's updates must apply in order): a hop per event, with its futexes
        # and the loop's wake-ups, cost more than the catalog read it carried under a
        # fleet's commits (issue 37). The reads see each commit's own files, which
        # never change, so reading them before the batch is tracked is the same.
        taking = cast(faust.Stream[Any], stream).take_events
        async for batch in taking(TRACK_BATCH, within=TRACK_WITHIN):
            commits: list[tuple[Any, tuple[Any, Any]]] = []
            for event in batch:
                if event.message.topic != topics.commits:
                    continue
                try:
                    commits.append((event, handler_and_model(event)))
                except Exception as exc:  # a Faust agent that raises stops the worker
                    await park(event, exc)
            outcomes = await _retrying(handle_all, [d for _, d in commits]) if commits else []
            found_by_event = {id(e): found for (e, _), found in zip(commits, outcomes, strict=True)}
            for event in batch:
                _tracking(event)
                try:
                    if event.message.topic != topics.commits:
                        await track_table(parse_updates(event.value))
                        continue
                    found = found_by_event.get(id(event))
                    if not found:
                        continue  # parked above (None), or nothing to track
                    if isinstance(found, Exception):
                        raise found
                    if lands_where_tracked(event, found[0]["table"]):
                        await track_table(found)
                    else:
                        await send_updates(found)
                except Exception as exc:  # a Faust agent that raises stops the worker
                    await park(event, exc)

    changelog = changelog_topic(settings)

    async def changelog_known() -> None:
        """Wait while the consumer's metadata has no partitions for the changelog.

        Faust compares the changelog's partition count with the updates topic's before
        a table write, and a changelog missing from the consumer's metadata counts 0:
        every write would fail (and its update be parked) until the metadata is next
        asked for. A missing topic is weather, not a bad event: the agent waits."""
        waited = 0.0
        while app.consumer.topic_partitions(changelog) == 0:
            if waited % 30 == 0:
                log.warning(
                    "%s is not in the consumer's metadata yet (%.0fs): updates wait",
                    changelog,
                    waited,
                )
            await asyncio.sleep(1.0)
            waited += 1.0

    async def track_table(found: list[Update]) -> None:
        """One message's updates: one table's (grouped by ``fan_out``), though a
        message from anyone else may mix tables."""
        await changelog_known()
        for table_id, grouped in grouped_by(found, table_of).items():
            first = grouped[0]
            # Cached properties are taken here; only a load goes to a thread.
            properties = reader.cached_properties(table_id)
            if properties is None:
                properties = await _retrying(reader.properties, first["table"], table_id)
            per_partition = grouped_by(grouped, partition_of)
            if properties is None:
                for key in per_partition:
                    partitions.pop(key, None)  # the table is gone
                continue
            states = {key: partitions.get(key) for key in per_partition}
            # Partitions never read from the catalog are read first, all in one query.
            unread = [
                batch[0]["partition_key"]
                for key, batch in per_partition.items()
                if needs_first_reading(states[key], batch[0])
            ]
            if unread:
                for reading in await _retrying(reader.readings, first["table"], table_id, unread):
                    key = partition_of(reading)
                    per_partition[key] = [reading, *per_partition[key]]
            for key, batch in per_partition.items():
                await track_one(key, states[key], batch, properties)

    async def track_one(
        key: str, state: Any, batch: list[Update], properties: TableProperties
    ) -> None:
        tracked, request = apply_update(state, batch, properties, time.time(), resend_after)
        partitions[key] = tracked.as_dict()
        if request is not None:
            planned = plan_request_event(tracked, request)
            log.info(
                "%s %r: %s compaction due (score %.2f): %s",
                tracked.table,
                tracked.partition_key,
                request.kind,
                request.score,
                "; ".join(request.reasons),
            )
            await _delivered(
                plan_requests,
                key=f"{tracked.table}/{tracked.partition_key}".encode(),
                value=planned.to_json(),
            )

    check = CatalogCheck(reader, send_updates).run

    app.agent(source, name="fan_out")(fan_out)
    app.agent(tracked, name="track")(track)
    app.timer(settings.metrics_check_interval, on_leader=True)(check)
    app.task(check)  # on start: what happened while no worker ran is counted at once
    if on_timer is not None:
        app.timer(settings.service_heartbeat_seconds)(on_timer)
    return app


class CatalogCheck:
    """The periodic check of the catalog: reads what changed since the check before
    the last (its cost follows the changes: ``firn.catalog.metrics.changed_partitions``)
    and every ``FULL_CHECK_EVERY``-th time every partition, so anything a change stamp
    could not show (a transaction that committed a stamp older than the window) is
    still read in bounded time. The window starts a check early: a stamp taken before
    the last check's read but committed after it is read by the next one."""

    def __init__(
        self, reader: CatalogReader, send: Callable[[list[Update]], Awaitable[None]]
    ) -> None:
        self.reader = reader
        self.send = send
        self.count = 0
        self.since = 0
        """The newest change stamp read so far."""
        self.previous = 0
        """Where the last check's window began: the next one starts there."""

    async def run(self) -> None:
        """One check: read, send the readings on, log what it cost."""
        started = time.monotonic()
        full = self.count % FULL_CHECK_EVERY == 0
        self.count += 1
        if full:
            high = await _retrying(self.reader.change_stamp)  # read first: nothing skipped
            found = await _retrying(self.reader.all_readings)
        else:
            found, high = await _retrying(self.reader.changed_readings, self.previous)
        self.previous, self.since = self.since, max(high, self.since)
        await self.send(found)
        log.info(
            "catalog check (%s): %d partition(s) read in %.2fs",
            "every partition" if full else f"changed after stamp {self.previous}",
            len(found),
            time.monotonic() - started,
        )


async def _delivered(topic: Any, **message: Any) -> None:
    """Send and wait for the broker's acknowledgement. Faust commits an event's offset
    once the agent moves past it, so what the event caused must be durable by then."""
    await _all_delivered(topic, [message])


async def _all_delivered(topic: Any, messages: list[dict[str, Any]]) -> None:
    """Send every message in order, then wait until the broker acknowledged them all."""
    pending = [await topic.send(**message) for message in messages]
    for sent in pending:
        await sent


def _tracking(event: Any) -> None:
    """Make ``event`` this task's current event. A Faust table write sends its changelog
    message to the Kafka partition of the current event, which Faust sets per event
    only for a stream iterated one event at a time (in the task iterating it); a batch
    from ``take_events`` is gathered by another task, so ``track`` sets each event as
    it tracks it: its entries and their changelog stay on the event's partition."""
    faust_streams._current_event.set(weakref.ref(event))


async def _retrying(call: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking catalog call in a thread, retrying while it fails transiently:
    a Postgres outage pauses the stream instead of crashing the agent or dropping the
    event. A permanent failure is raised (and the event parked)."""
    retrying = AsyncRetrying(**transient_retries("catalog call"))
    return await retrying(asyncio.to_thread, call, *args)
