"""What every confluent-kafka service does around its handlers.

Start-up: connect to the catalog and migrate it, make sure the topics exist, register
in the service registry. Then run the consume loop, refreshing the heartbeat while
idle, until SIGTERM or SIGINT. Shutdown: finish the message in hand, commit, mark the
instance stopped.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType

from firn.kafka import Topics, consumer, ensure_topics, producer
from firn.kafka.loop import ConsumeLoop, EventHandler
from firn.postgres import apply_migrations, connect, registry
from firn.postgres.connection import Connection
from firn.settings import FirnSettings

log = logging.getLogger(__name__)


@dataclass
class ServiceContext:
    """What a service's handlers may use; built once at start-up."""

    name: str
    settings: FirnSettings
    topics: Topics
    conn: Connection
    instance_id: str = ""
    extras: dict[str, object] = field(default_factory=dict)


def prepare(name: str, settings: FirnSettings) -> ServiceContext:
    """Connect, migrate, create topics, register: the common start-up of every service."""
    conn = connect(settings)
    apply_migrations(conn)
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    context = ServiceContext(name=name, settings=settings, topics=topics, conn=conn)
    context.instance_id = registry.register(conn, name)
    log.info("%s started as %s", name, context.instance_id)
    return context


def run_consumer_service(
    context: ServiceContext,
    *,
    consumes: list[str],
    handlers: Mapping[str, EventHandler],
    on_idle: Callable[[], None] = lambda: None,
) -> None:
    """Run the consume loop for ``context`` until a stop signal arrives."""
    settings = context.settings
    loop = ConsumeLoop(
        consumer(settings, group_id=f"{settings.topic_prefix}{context.name}"),
        producer(settings),
        topics=consumes,
        handlers=handlers,
        dlq_topic=context.topics.dlq,
        service=context.name,
        on_idle=_every(
            settings.service_heartbeat_seconds,
            lambda: (registry.heartbeat(context.conn, context.instance_id), on_idle()),
        ),
    )

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s received signal %d; stopping", context.name, signum)
        loop.stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        loop.run()
    finally:
        registry.deregister(context.conn, context.instance_id)
        context.conn.close()
        log.info("%s stopped", context.name)


def _every(seconds: float, action: Callable[[], object]) -> Callable[[], None]:
    """Wrap ``action`` so that calling it often runs it at most once per ``seconds``."""
    last = time.monotonic()

    def maybe() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= seconds:
            last = now
            action()

    return maybe
