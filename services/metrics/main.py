"""Wiring of the metrics service: registry, topics, then the Faust worker."""

from __future__ import annotations

import asyncio
import logging

import faust

import firn
from firn.postgres import registry
from firn.settings import FirnSettings
from firn_services.metrics.app import create_app
from firn_services.metrics.handlers import CatalogReader
from firn_services.runtime import prepare

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
        await asyncio.to_thread(registry.heartbeat, context.conn, context.instance_id)

    app = create_app(settings, reader, on_timer=heartbeat)
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        reader.close()
        registry.deregister(context.conn, context.instance_id)
        context.conn.close()
        log.info("%s stopped", NAME)
