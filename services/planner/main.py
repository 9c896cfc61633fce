"""Wiring of the planner: consumes firn.plan-requests.

Planning itself (SPEC 5) arrives with the compaction engine; until then the planner
starts, connects and parks every event it cannot handle in the DLQ.
"""

from __future__ import annotations

from firn.settings import FirnSettings
from firn_services.runtime import prepare, run_consumer_service

NAME = "planner"


def main(settings: FirnSettings) -> None:
    context = prepare(NAME, settings)
    run_consumer_service(context, consumes=[context.topics.plan_requests], handlers={})
