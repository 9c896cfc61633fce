"""Wiring of the committer: consumes firn.task-results.

Plan commits (SPEC 7) arrive with the compaction engine; until then the committer
starts, connects and parks every event it cannot handle in the DLQ.
"""

from __future__ import annotations

from firn.settings import FirnSettings
from firn_services.runtime import prepare, run_consumer_service

NAME = "committer"


def main(settings: FirnSettings) -> None:
    context = prepare(NAME, settings)
    run_consumer_service(context, consumes=[context.topics.task_results], handlers={})
