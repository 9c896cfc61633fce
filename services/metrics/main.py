"""Wiring of the metrics service: registry, topics, then the Faust worker."""

from __future__ import annotations

import asyncio
import logging

import faust

from firn.postgres import registry
from firn.settings import FirnSettings
from firn_services.metrics.app import create_app
from firn_services.runtime import prepare

NAME = "metrics"
log = logging.getLogger(__name__)


def main(settings: FirnSettings) -> None:
    # Faust subscribes by name and ignores topics that do not exist yet, so the
    # topics are created (in prepare) before the worker starts.
    context = prepare(NAME, settings)

    async def heartbeat() -> None:
        await asyncio.to_thread(registry.heartbeat, context.conn, context.instance_id)

    app = create_app(settings, on_timer=heartbeat)
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        registry.deregister(context.conn, context.instance_id)
        context.conn.close()
        log.info("%s stopped", NAME)
