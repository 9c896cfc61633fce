"""Wiring of the publisher: consumes firn.compactions (a consumer group of its own,
beside the metrics service's), publishes the tables they name into the Iceberg SQL
catalog in Firn's Postgres ``publisher_gather`` seconds after the first event, and
sweeps every ``publisher_sweep_interval`` seconds for tables that are behind."""

from __future__ import annotations

from firn.iceberg.properties import io_properties as file_io
from firn.iceberg.publisher import Publisher
from firn.iceberg.rest import serve as serve_rest
from firn.postgres.connection import ReconnectingConnection
from firn.settings import FirnSettings
from firn_services.publisher.handlers import Publishing
from firn_services.runtime import prepare, run_consumer_service

NAME = "publisher"


def main(settings: FirnSettings) -> None:
    context = prepare(NAME, settings)
    db = ReconnectingConnection(settings)
    io_properties = file_io(settings)
    # The read-only REST catalog, when asked for: one per publisher process.
    rest = serve_rest(settings) if settings.iceberg_rest_port else None
    try:
        publishing = Publishing(
            lambda: Publisher(
                db.conn, catalog=settings.iceberg_catalog, io_properties=io_properties
            ),
            interval=settings.publisher_sweep_interval,
            min_interval=settings.publisher_min_interval,
            gather=settings.publisher_gather,
        )
        run_consumer_service(
            context,
            consumes=[context.topics.compactions],
            handlers={"compaction": publishing.compaction},
            on_idle=publishing.idle,
            idle_every=0.0,  # between every two messages: gathered tables come due
        )
    finally:
        if rest is not None:
            rest.stop()
        db.close()
