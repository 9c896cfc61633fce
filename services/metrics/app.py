"""The metrics Faust app (SPEC 4), built from settings, never at import time.

Two agents, with a topic between them so that every update of one partition lands
on one Kafka partition, and the Faust table (and its changelog) stays partitioned
the same way when several metrics workers share the load:

- ``fan_out`` reads firn.commits and firn.compactions (keyed by table), decodes each
  event once, and sends one update per touched partition to the updates topic keyed
  ``table_id/partition``: a commit's increment, or after a compaction a fresh catalog
  reading of the compacted partition. Invalid events go to firn.dlq with the reason.
- ``track`` folds each update into the partition's entry in the ``partitions``
  table and sends a plan request to firn.plan-requests when the triggers fire.

A timer (on the leader) and a start-up task send a reading of every partition
through the same path: lost commit events, restarts and time-based triggers are
made good there.

The app reaches Kafka as the other services do (``kafka_access``: the security
pass-through, idempotent acks=all producers), and its own topics (the table's
changelog, the assignor's) take the configured partitions and replication.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import faust

from firn.errors import FirnError
from firn.events.dead_letters import DeadLetterEvent
from firn.kafka import Topics
from firn.kafka.loop import UnhandledEventError, decode
from firn.settings import FirnSettings
from firn_services.metrics.handlers import (
    CatalogReader,
    Update,
    apply_update,
    commit_updates,
    needs_first_reading,
    plan_request_event,
)
from firn_services.metrics.kafka_access import IdempotentTransport, broker_credentials

log = logging.getLogger(__name__)

RETRY_SECONDS = 2.0


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
    )
    app.transport = IdempotentTransport(app.conf.broker_consumer, app)
    source = app.topic(topics.commits, topics.compactions, value_serializer="raw")
    updates = app.topic(
        topics.metrics_updates,
        key_serializer="raw",
        value_serializer="json",
        partitions=partition_count,
    )
    plan_requests = app.topic(topics.plan_requests, value_serializer="raw")
    dlq = app.topic(topics.dlq, value_serializer="raw")
    insync = {"min.insync.replicas": str(settings.min_insync_replicas())}
    partitions = app.Table(
        "partitions",
        default=None,
        partitions=partition_count,
        extra_topic_configs=insync if settings.topic_replication > 1 else None,
    )
    # A request no compaction answered is sent again after this long: it was lost, or
    # its plan failed. Not sooner: a plan may simply still be queued or running.
    resend_after = max(2 * settings.metrics_check_interval, 60.0)

    async def send_updates(found: list[tuple[str, Update]]) -> None:
        for key, update in found:
            await _delivered(updates, key=key.encode(), value=update)

    async def park(event: Any, reason: str) -> None:
        message = event.message
        log.warning(
            "parking %s[%d]@%d in %s: %s",
            message.topic,
            message.partition,
            message.offset,
            topics.dlq,
            reason,
        )
        letter = DeadLetterEvent(
            service="metrics",
            source_topic=message.topic,
            source_partition=message.partition,
            source_offset=message.offset,
            key=_text(event.key),
            reason=reason,
            payload=_text(event.value) or "",
        )
        await _delivered(
            dlq,
            key=event.key,
            value=letter.to_json(),
            headers={"firn.reason": reason.encode(), "firn.service": b"metrics"},
        )

    async def fan_out(stream: AsyncIterator[Any]) -> None:
        async for event in stream.events():  # type: ignore[attr-defined]
            try:
                decoded = decode(event.value)
                kind = decoded["event_type"]
                if kind == "commit":
                    found = commit_updates(decoded)
                elif kind == "compaction":
                    found = await _retrying(reader.compaction_readings, decoded)
                else:
                    raise UnhandledEventError(f"no handler for event type {kind!r}")
            except FirnError as exc:
                await park(event, str(exc))
                continue
            await send_updates(found)

    async def track(stream: AsyncIterator[Any]) -> None:
        async for event in stream.events():  # type: ignore[attr-defined]
            update, key = event.value, event.key.decode()
            properties = await _retrying(reader.properties, update["table"], update["table_id"])
            if properties is None:
                partitions.pop(key, None)  # the table is gone
                continue
            state = partitions.get(key)
            batch = [update]
            if needs_first_reading(state, update):
                batch = [
                    reading
                    for _, reading in await _retrying(
                        reader.readings,
                        update["table"],
                        update["table_id"],
                        update["partition_key"],
                    )
                ] + batch
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

    async def check() -> None:
        started = time.monotonic()
        found = await _retrying(reader.all_readings)
        await send_updates(found)
        log.info(
            "catalog check: %d partition(s) read in %.2fs", len(found), time.monotonic() - started
        )

    app.agent(source, name="fan_out")(fan_out)
    app.agent(updates, name="track")(track)
    app.timer(settings.metrics_check_interval, on_leader=True)(check)
    app.task(check)  # on start: what happened while no worker ran is counted at once
    if on_timer is not None:
        app.timer(settings.service_heartbeat_seconds)(on_timer)
    return app


async def _delivered(topic: Any, **message: Any) -> None:
    """Send and wait for the broker's acknowledgement. Faust commits an event's offset
    once the agent moves past it, so what the event caused must be durable by then."""
    pending = await topic.send(**message)
    await pending


async def _retrying(call: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking catalog call in a thread, retrying until it succeeds: a
    Postgres outage pauses the stream instead of crashing the agent (Faust would
    keep the worker running without it) or dropping the event."""
    while True:
        try:
            return await asyncio.to_thread(call, *args)
        except FirnError as exc:
            if not exc.retryable:
                raise
            log.warning("catalog call failed, retrying in %.0fs: %s", RETRY_SECONDS, exc)
        except Exception as exc:  # psycopg errors: reconnect and retry
            log.warning("catalog call failed, retrying in %.0fs: %r", RETRY_SECONDS, exc)
        await asyncio.sleep(RETRY_SECONDS)


def _text(value: bytes | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", errors="replace")
