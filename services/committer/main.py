"""Wiring of the committer: consumes firn.task-results, produces firn.compactions,
and sweeps for complete plans whose task-result events were lost."""

from __future__ import annotations

from firn.kafka import producer
from firn.postgres.connection import ReconnectingConnection
from firn.settings import FirnSettings
from firn_services.committer.handlers import Committer
from firn_services.runtime import prepare, run_consumer_service

NAME = "committer"


def main(settings: FirnSettings) -> None:
    context = prepare(NAME, settings)
    db = ReconnectingConnection(settings)
    try:
        committer = Committer(db, producer(settings), context.topics.compactions)
        run_consumer_service(
            context,
            consumes=[context.topics.task_results],
            handlers={"task-result": committer.task_result},
            on_idle=committer.sweep,
        )
    finally:
        db.close()
