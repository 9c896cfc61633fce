"""The committer's handler and sweep: a Prepared task may complete its plan; when
every task of a plan is Prepared the plan is committed in one transaction (SPEC 7)
and a compaction event announces it.

Idempotent: committing a committed plan is a no-op that still (re)announces it, so
a crash between the commit and the event loses nothing; metrics treats compaction
events by snapshot, so a repeat changes nothing there either. The sweep commits
plans whose task-result events were lost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Producer

from firn.catalog.compactions import commit_plan, committable_plans, compaction_event
from firn.errors import FirnError
from firn.events.schemas import validate
from firn.events.tasks import TaskResultEvent
from firn.postgres.connection import Connection

log = logging.getLogger(__name__)


class Committer:
    """Commits complete plans and announces them."""

    def __init__(self, conn: Connection, producer: Producer, topic: str) -> None:
        self.conn = conn
        self.producer = producer
        self.topic = topic

    def task_result(self, event: Mapping[str, Any]) -> None:
        validate(dict(event))  # a ConfigError parks the event in the DLQ
        result = TaskResultEvent.model_validate(event)
        if result.outcome != "prepared":
            return  # retries and failures are the dispatcher's; nothing to commit
        self.commit(result.plan_id)

    def commit(self, plan_id: int) -> str:
        """Commit ``plan_id`` if complete and announce it; returns the outcome."""
        outcome = commit_plan(self.conn, plan_id)
        if outcome.outcome in ("committed", "already"):
            self._announce(plan_id)
        if outcome.outcome == "failed":
            log.warning("plan %d failed its commit checks: %s", plan_id, outcome.reason)
        elif outcome.outcome == "committed":
            log.info(
                "plan %d committed as snapshot %s: %d files in, %d out",
                plan_id,
                outcome.snapshot_id,
                outcome.removed_files,
                outcome.added_files,
            )
        return outcome.outcome

    def sweep(self) -> list[int]:
        """Commit every complete plan (their task-result events may have been lost)."""
        plans = committable_plans(self.conn)
        for plan_id in plans:
            self.commit(plan_id)
        return plans

    def _announce(self, plan_id: int) -> None:
        event = compaction_event(self.conn, plan_id)
        if event is None:
            return
        key = f"{event.table}/{event.partition_key}".encode()
        self.producer.produce(self.topic, key=key, value=event.to_json())
        if self.producer.flush(30) > 0:
            raise FirnError("the compaction event was not acknowledged", retryable=True)
