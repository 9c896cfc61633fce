"""Wiring of the metrics service: registry, topics, then the Faust worker.

A Faust worker ends when its Kafka clients cannot reach the broker at a bad moment
(it once did while starting during a broker restart). That is weather, not a reason
for the process to exit: the worker is built again on a fresh event loop after a
backoff once the broker answers again, and its table comes back from the changelog.
Only a worker that fails ``WORKER_FAILURE_LIMIT`` times within
``WORKER_FAILURE_WINDOW`` seconds while the broker answers (a bug, not weather) ends
the process.

A worker whose consumer stops reading a partition (messages waiting, the group's
committed offset still for ``STUCK_SECONDS``; faust-streaming's consumer has done so
after a rebalance, leaving that partition's commit events unread until a restart) is
ended by its own heartbeat timer and built again the same way.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import faust
from confluent_kafka import KafkaException
from tenacity import RetryCallState, Retrying, retry_if_result

import firn
from firn.kafka import admin_client, consumer, ensure_topics
from firn.kafka.lag import StuckWatch, group_offsets, report_lag
from firn.observability.catalog_collector import catalog_collector
from firn.postgres import registry
from firn.postgres.retry import WAIT, backoff, is_transient
from firn.settings import FirnSettings
from firn_services.metrics.app import changelog_topic, create_app
from firn_services.metrics.handlers import CatalogReader
from firn_services.runtime import prepare, stopped

NAME = "metrics"
log = logging.getLogger(__name__)


def main(settings: FirnSettings) -> None:
    # Faust subscribes by name and ignores topics that do not exist yet, so the
    # topics are created (in prepare) before the worker starts. The catalog's figures
    # are served from here only: one reading per scrape is enough for the stack.
    collector, collector_db = catalog_collector(settings)
    context = prepare(NAME, settings, collectors=[collector])
    # The table's changelog too, compacted as Faust makes it: created by Faust while
    # the other services started, it was missing from the consumer's first metadata,
    # and every update failed "changelog has 0 partitions" until that metadata aged.
    ensure_topics(settings, (changelog_topic(settings),), config={"cleanup.policy": "compact"})
    # Faust's group is named after the app (create_app); this consumer only asks for
    # the group's committed offsets, it never subscribes or commits.
    asker = consumer(settings, f"{settings.topic_prefix}metrics", **{"enable.auto.commit": False})
    measured = (context.topics.commits, context.topics.compactions, context.topics.metrics_updates)
    lag_reported: set[tuple[str, int]] = set()
    watch = StuckWatch(STUCK_SECONDS)
    restart_asked = threading.Event()
    """Set by the heartbeat when it ends a stuck worker: a restart, not a failure."""

    def measure_lag() -> list[tuple[str, int]]:
        """Report the group's lag; the partitions it has stopped reading."""
        nonlocal lag_reported
        offsets = group_offsets(asker, measured)
        lag = {tp: n for tp, (_, n) in offsets.items()}
        report_lag(NAME, lag, lag_reported)
        lag_reported = set(lag)
        return watch.observe(time.monotonic(), offsets)

    # The service reads the catalog; it never commits, so it needs no Kafka publisher.
    reader = CatalogReader(
        lambda: firn.connect(settings=settings.model_copy(update={"kafka_bootstrap": None})),
        ttl=settings.metrics_check_interval,
    )

    async def heartbeat() -> None:
        try:
            await asyncio.to_thread(lambda: registry.heartbeat(context.conn, context.instance_id))
        except Exception as exc:  # a Faust timer that raises ends the worker
            if not is_transient(exc):
                raise
            log.warning("heartbeat failed, retried at the next one: %r", exc)
        try:
            stuck = await asyncio.to_thread(measure_lag)
        except Exception as exc:  # the broker is away or slow: the figures wait for it
            log.debug("consumer lag not measured: %r", exc)
            watch.reset()  # the consumer was cut off too: its minute starts again
            return
        if stuck:
            # Raising from a timer ends the worker; the loop below builds a new one,
            # whose new consumer fetches every partition it is given.
            watch.reset()
            restart_asked.set()
            raise StuckConsumerError(
                f"the group has not read {stuck} for {STUCK_SECONDS:.0f}s with messages "
                "waiting; starting the Faust worker again"
            )

    failures: list[float] = []
    try:
        while True:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            app = create_app(settings, reader, on_timer=heartbeat)
            worker = faust.Worker(app, loop=loop, loglevel=settings.log_level, quiet=True)
            try:
                worker.execute_from_commandline()
            except SystemExit as exc:
                if exc.code in (None, 0):
                    return  # stopped by a signal
                if restart_asked.is_set():
                    restart_asked.clear()
                    log.warning("the Faust worker stopped reading a partition; starting it again")
                    continue
                if _broker_answers(settings):  # not weather: count it
                    now = time.monotonic()
                    failures[:] = [t for t in failures if t > now - WORKER_FAILURE_WINDOW]
                    failures.append(now)
                    if len(failures) > WORKER_FAILURE_LIMIT:
                        raise
                    time.sleep(backoff(len(failures)))
                else:
                    _wait_for_broker(settings)
                log.warning("the Faust worker ended (exit %s); starting it again", exc.code)
    finally:
        asker.close()
        reader.close()
        collector_db.close()
        stopped(context)


WORKER_FAILURE_LIMIT = 5
WORKER_FAILURE_WINDOW = 600.0
STUCK_SECONDS = 60.0
"""How long a partition may have messages waiting while the group's committed offset
stands still before the worker is started again: far longer than any one event takes
(a catalog reading is milliseconds; a Postgres restart the handlers ride out, seconds),
and within the minute or two a stuck partition would otherwise hold its partitions'
compactions back for good."""


class StuckConsumerError(RuntimeError):
    """The Faust worker's consumer stopped reading a partition (``StuckWatch``)."""


def _broker_answers(settings: FirnSettings) -> bool:
    try:
        admin_client(settings).list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def _wait_for_broker(settings: FirnSettings) -> None:
    def log_retry(state: RetryCallState) -> None:
        assert state.next_action is not None
        log.warning("Kafka does not answer; trying again in %.1fs", state.next_action.sleep)

    Retrying(retry=retry_if_result(lambda answers: not answers), wait=WAIT, before_sleep=log_retry)(
        _broker_answers, settings
    )
