"""Wiring of the committer: consumes firn.task-results, produces firn.compactions,
and sweeps for complete plans whose task-result events were lost."""

from __future__ import annotations

from firn.kafka import producer
from firn.postgres import connect
from firn.settings import FirnSettings
from firn_services.committer.handlers import Committer
from firn_services.runtime import prepare, run_consumer_service

NAME = "committer"


def main(settings: FirnSettings) -> None:
    context = prepare(NAME, settings)
    conn = connect(settings, autocommit=True)
    try:
        committer = Committer(conn, producer(settings), context.topics.compactions)
        run_consumer_service(
            context,
            consumes=[context.topics.task_results],
            handlers={"task-result": committer.task_result},
            on_idle=committer.sweep,
        )
    finally:
        conn.close()
