"""The metrics Faust app, built from settings (never at import time).

It consumes firn.commits and firn.compactions. Per-partition metrics in a Faust table,
trigger evaluation and plan requests arrive with the services issue; until then every
event is decoded once at this edge and, having no handler yet, parked in firn.dlq with
its reason, exactly as an invalid event will be later.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import faust

from firn.kafka import Topics
from firn.kafka.loop import UnhandledEventError, decode
from firn.settings import FirnSettings

log = logging.getLogger(__name__)


def create_app(settings: FirnSettings, *, on_timer: Any = None) -> faust.App:
    topics = Topics.from_settings(settings)
    app = faust.App(
        f"{settings.topic_prefix}metrics",
        broker=f"kafka://{settings.kafka_servers()}",
        store="memory://",
        web_enabled=False,
        topic_partitions=4,
        # Offsets are committed by Faust only after the agent has processed the event.
        broker_commit_every=100,
        broker_commit_interval=1.0,
    )
    source = app.topic(topics.commits, topics.compactions, value_serializer="raw")
    dlq = app.topic(topics.dlq, value_serializer="raw")

    async def watch(stream: AsyncIterator[Any]) -> None:
        async for event in stream.events():  # type: ignore[attr-defined]
            try:
                decoded = decode(event.value)
                raise UnhandledEventError(f"no handler for event type {decoded['event_type']!r}")
            except UnhandledEventError as exc:
                log.warning(
                    "parking an event from %s in %s: %s", event.message.topic, topics.dlq, exc
                )
                await dlq.send(
                    key=event.key,
                    value=event.value,
                    headers={"firn.reason": str(exc).encode(), "firn.service": b"metrics"},
                )

    app.agent(source, name="watch")(watch)
    if on_timer is not None:
        app.timer(settings.service_heartbeat_seconds)(on_timer)
    return app
