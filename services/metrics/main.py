"""Wiring of the metrics service: registry, topics, then the Faust worker."""

from __future__ import annotations

import asyncio
import logging

import faust

import firn
from firn.postgres import registry
from firn.postgres.retry import is_transient
from firn.settings import FirnSettings
from firn_services.metrics.app import create_app
from firn_services.metrics.handlers import CatalogReader
from firn_services.runtime import prepare, stopped

NAME = "metrics"
log = logging.getLogger(__name__)


def main(settings: FirnSettings) -> None:
    # Faust subscribes by name and ignores topics that do not exist yet, so the
    # topics are created (in prepare) before the worker starts.
    context = prepare(NAME, settings)
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

    app = create_app(settings, reader, on_timer=heartbeat)
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        reader.close()
        stopped(context)
