"""Wiring of the planner: consumes firn.plan-requests, produces firn.plan-tasks."""

from __future__ import annotations

from firn.kafka import producer
from firn.settings import FirnSettings
from firn_services.planner.handlers import Planner
from firn_services.runtime import open_catalog, prepare, run_consumer_service

NAME = "planner"


def main(settings: FirnSettings) -> None:
    context = prepare(NAME, settings)
    with open_catalog(NAME, settings) as catalog:
        planner = Planner(catalog, producer(settings), context.topics.plan_tasks)
        run_consumer_service(
            context,
            consumes=[context.topics.plan_requests],
            handlers={"plan-request": planner.plan_request},
        )
