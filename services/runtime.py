"""What every confluent-kafka service does around its handlers.

Start-up: serve Prometheus metrics on the service's port (docs/operations/monitoring.md),
connect to the catalog and migrate it, make sure the topics exist, register in the
service registry. Then run the consume loop, refreshing the heartbeat while idle,
until SIGTERM or SIGINT. Shutdown: finish the message in hand, commit, mark the
instance stopped.

Database and broker restarts are weather, not reasons to exit: the catalog connection
is opened again when found broken, and the consume loop retries the message in hand
(and the periodic work) with backoff while Postgres errors are transient.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.registry import Collector

import firn
from firn.kafka import Topics, consumer, ensure_topics, producer
from firn.kafka.loop import ConsumeLoop, EventHandler
from firn.observability.endpoint import Endpoint, serve
from firn.observability.sensors import PrometheusSensors
from firn.postgres import apply_migrations, connect, registry
from firn.postgres.connection import Connection, ReconnectingConnection
from firn.postgres.retry import is_transient, retrying_transient
from firn.sensors import install
from firn.settings import FirnSettings
from firn.signals import stop_on_signals

log = logging.getLogger(__name__)


@dataclass
class ServiceContext:
    """What a service's handlers may use; built once at start-up."""

    name: str
    settings: FirnSettings
    topics: Topics
    db: ReconnectingConnection
    instance_id: str = ""
    extras: dict[str, object] = field(default_factory=dict)
    metrics: Endpoint | None = None
    """The service's /metrics server; None when its port is 0 or was taken."""

    @property
    def conn(self) -> Connection:
        """The service's catalog connection, opened again if it broke."""
        return self.db.conn


def prepare(
    name: str, settings: FirnSettings, *, collectors: Iterable[Collector] = ()
) -> ServiceContext:
    """Serve metrics, connect, migrate, create topics, register: the common start-up
    of every service. The metrics come first, so a service waiting for its database
    already answers a scrape (with its Postgres errors). A database or broker that is
    not there yet (or restarting) is waited for, with backoff, for up to
    ``STARTUP_PATIENCE`` seconds."""
    endpoint = serve_metrics(name, settings, collectors=collectors)
    context = retrying_transient(
        lambda: _prepare(name, settings),
        what=f"{name} start-up",
        deadline_seconds=STARTUP_PATIENCE,
    )
    context.metrics = endpoint
    return context


def serve_metrics(
    name: str,
    settings: FirnSettings,
    *,
    registry: CollectorRegistry = REGISTRY,
    collectors: Iterable[Collector] = (),
) -> Endpoint | None:
    """Report the edge clients' readings (Postgres errors, consumer lag, dead
    letters) to Prometheus, register ``collectors`` and serve ``registry`` on the
    service's ``FIRN_<NAME>_PROMETHEUS_PORT``; None when that is 0 (or the port is
    taken)."""
    install(PrometheusSensors())
    for collector in collectors:
        registry.register(collector)
    port = settings.prometheus_port(name)
    if port == 0:
        return None
    return serve(settings.prometheus_host, port, registry, what=name)


STARTUP_PATIENCE = 300.0


def open_catalog(name: str, settings: FirnSettings) -> firn.Catalog:
    """The service's own ``firn.Catalog`` (it never publishes commit events), opened
    with the start-up's patience: the database may restart between ``prepare`` and
    this, and a service must not exit for it."""
    reading = settings.model_copy(update={"kafka_bootstrap": None})
    return retrying_transient(
        lambda: firn.connect(settings=reading),
        what=f"{name} catalog",
        deadline_seconds=STARTUP_PATIENCE,
    )


def _prepare(name: str, settings: FirnSettings) -> ServiceContext:
    conn = connect(settings)
    try:
        apply_migrations(conn)
        conn.autocommit = True
        topics = Topics.from_settings(settings)
        ensure_topics(settings, topics.all())
        instance_id = registry.register(conn, name)
    except BaseException:
        conn.close()
        raise
    db = ReconnectingConnection(settings, conn=conn)
    context = ServiceContext(
        name=name, settings=settings, topics=topics, db=db, instance_id=instance_id
    )
    log.info("%s started as %s", name, context.instance_id)
    return context


def run_consumer_service(
    context: ServiceContext,
    *,
    consumes: list[str],
    handlers: Mapping[str, EventHandler],
    on_idle: Callable[[], object] = lambda: None,
    idle_every: float | None = None,
) -> None:
    """Run the consume loop for ``context`` until a stop signal arrives. ``on_idle``
    runs with the heartbeat, every ``service_heartbeat_seconds``, or every
    ``idle_every`` seconds on a timer of its own when given."""
    settings = context.settings
    group = f"{settings.topic_prefix}{context.name}"
    loop = ConsumeLoop(
        lambda **extra: consumer(settings, group, **extra),
        producer(settings),
        topics=consumes,
        handlers=handlers,
        dlq_topic=context.topics.dlq,
        service=context.name,
        transient=is_transient,
        lag_every=settings.service_heartbeat_seconds,
        stuck_after=settings.kafka_stuck_seconds,
        on_idle=_idle_work(context, on_idle, idle_every),
    )

    def _noted(signum: int) -> None:
        log.info("%s received signal %d; stopping", context.name, signum)

    with stop_on_signals(loop.stopping, on_signal=_noted):
        try:
            loop.run()
        finally:
            stopped(context)


def _idle_work(
    context: ServiceContext, on_idle: Callable[[], object], idle_every: float | None
) -> Callable[[], None]:
    """The heartbeat and ``on_idle``, each run at most once per its own interval
    (``on_idle`` with the heartbeat when ``idle_every`` is None)."""
    beat = context.settings.service_heartbeat_seconds

    def heartbeat() -> None:
        registry.heartbeat(context.conn, context.instance_id)

    def both() -> None:
        heartbeat()
        on_idle()

    if idle_every is None:
        return _every(beat, both)
    beating, working = _every(beat, heartbeat), _every(idle_every, on_idle)

    def apart() -> None:
        beating()
        working()

    return apart


def stopped(context: ServiceContext) -> None:
    """Mark the instance stopped (if the database is there to hear it) and close."""
    try:
        registry.deregister(context.conn, context.instance_id)
    except Exception as exc:  # it stops either way; its heartbeat simply ages out
        if not is_transient(exc):
            raise
        log.warning("%s could not record that it stopped: %r", context.name, exc)
    context.db.close()
    if context.metrics is not None:
        context.metrics.close()
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
