"""The committer's handler and sweep: a Prepared task may complete its plan; when
every task of a plan is Prepared the plan is committed in one transaction (design §7),
together with every other ready plan of its table (one snapshot for them all), and a
compaction event per plan announces it.

Idempotent: committing a committed plan is a no-op that still (re)announces it
unless this process already has, so a crash between the commit and the event loses
nothing; metrics treats compaction events by snapshot, so a repeat changes nothing
there either. The sweep commits
plans whose task-result events were lost and, every ``expire_every`` seconds, applies
retention (``firn.catalog.expiry``), listing storage for unknown files every
``sweep_every`` seconds (a listing costs far more than the catalog queries): expiry
is idempotent, so several committers doing it at once only repeat each other's work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from confluent_kafka import Producer

from firn.catalog.compactions import PlanCommit, committable_plans, compaction_event
from firn.catalog.event_rows import task_named
from firn.catalog.expiry import expire
from firn.catalog.observed import compaction_latencies, merge_latencies
from firn.catalog.plans import plan_place
from firn.catalog.tables import table_names
from firn.engine import compaction
from firn.errors import ConfigError, FirnError
from firn.events.tasks import TaskResultEvent
from firn.logs import with_context
from firn.model.states import PlanOutcome, TaskState
from firn.observability.instruments import (
    COMPACTION_LATENCY,
    PLANS_COMMITTED,
    PLANS_FAILED,
    REWRITTEN_BYTES,
)
from firn.postgres.connection import Connection, ReconnectingConnection
from firn.postgres.retry import is_transient
from firn_services.recent import Recent, TaskKey

log = logging.getLogger(__name__)

ANNOUNCED_REMEMBERED = 10_000
"""Plans whose announcement the committer remembers: far more than a plan's
task-result events are spread over."""

EXPIRY_TURN_SECONDS = 2.0
"""Longest one sweep spends applying retention before the committer goes back to task
results: a round over every table of a 1,000-table fleet took about a minute, and
every plan of the fleet waited that long to commit. The round goes on at the next
sweep, where it stopped."""


class Committer:
    """Commits complete plans and announces them."""

    def __init__(
        self,
        db: ReconnectingConnection,
        producer: Producer,
        topic: str,
        *,
        expire_every: float = 300.0,
        sweep_every: float = 3600.0,
        expiry_turn: float = EXPIRY_TURN_SECONDS,
    ) -> None:
        self.db = db
        self.producer = producer
        self.topic = topic
        self.expire_every = expire_every
        self.sweep_every = sweep_every
        self.expiry_turn = expiry_turn
        self._last_expiry: float | None = None
        self._last_sweep: float | None = None
        self._expiring: list[str] = []
        """The tables the current retention round has yet to reach, in order."""
        self._round_started = 0.0
        self._listing = False
        self._listed_all = True
        self._announced: Recent[int] = Recent(ANNOUNCED_REMEMBERED)
        """Plans this process announced (``_announce``)."""
        self._committed: Recent[TaskKey] = Recent(ANNOUNCED_REMEMBERED)
        """The tasks of the plans this process committed and announced, as their
        task-result events name them: a table's plans commit together at the first
        of their results, and each later one would cost three catalog reads to find
        its plan committed already. An event that differs in any field is not one of
        them, and is checked against the catalog as any other."""

    @property
    def conn(self) -> Connection:
        return self.db.conn

    def task_result(self, result: TaskResultEvent) -> None:
        """A wake-up for the plan of the task the event names. What is committed,
        and whether, comes from the catalog rows alone; an event that disagrees with
        its task's row goes to the DLQ, one about an earlier attempt is dropped."""
        if TaskKey.of(result) in self._committed:
            return  # its plan was committed and announced here, with another task's result
        task = task_named(self.conn, result)
        if result.attempt < task.attempt:
            with_context(log, task=task.task_id).info(
                "result of attempt %d is stale", result.attempt
            )
            return
        if task.state not in (TaskState.PREPARED, TaskState.COMMITTED):
            return  # retries and failures are the dispatcher's; nothing to commit
        # Committed already: a redelivery after a crash between the commit and its
        # announcement; commit() is a no-op then that announces it again.
        self.commit(task.plan_id)

    def commit(self, plan_id: int) -> PlanOutcome:
        """Commit ``plan_id`` if complete, with every other ready plan of its table
        (one transaction, one snapshot), and announce them; ``plan_id``'s outcome."""
        return self._settled(compaction.commit_with_ready(self.conn, plan_id))[0].outcome

    def _settled(self, outcomes: Sequence[PlanCommit]) -> Sequence[PlanCommit]:
        """Count, log and announce what a commit did to each of its plans."""
        announce = []
        for outcome in outcomes:
            here = with_context(log, plan=outcome.plan_id)
            if outcome.outcome in (PlanOutcome.COMMITTED, PlanOutcome.FAILED):
                self._observe(outcome)
            if outcome.outcome == PlanOutcome.COMMITTED or (
                outcome.outcome == PlanOutcome.ALREADY and outcome.plan_id not in self._announced
            ):
                announce.append(outcome)
            if outcome.outcome == PlanOutcome.FAILED:
                here.warning("failed its commit checks: %s", outcome.reason)
            elif outcome.outcome == PlanOutcome.COMMITTED:
                here.info(
                    "committed as snapshot %s: %d files in, %d out",
                    outcome.snapshot_id,
                    outcome.removed_files,
                    outcome.added_files,
                )
        self._announce(announce)
        self._committed.add(
            TaskKey(task_id, attempt, o.plan_id, e.table_id, e.table, e.partition_key)
            for o in announce
            if (e := o.event) is not None
            for task_id, attempt in o.tasks
        )
        return outcomes

    def _observe(self, outcome: PlanCommit) -> None:
        """Count a plan that just committed or failed (once: a repeat finds it
        ``already`` committed or ``stale``). The plan's fate is durable whatever
        happens here, so a failure to read its figures only loses them."""
        try:
            if outcome.outcome == PlanOutcome.FAILED:
                place = plan_place(self.conn, outcome.plan_id)
                if place is not None:
                    PLANS_FAILED.labels(place.table, "commit").inc()
                return
            # A plan this process committed carries its event: nothing to read back.
            event = outcome.event or compaction_event(self.conn, outcome.plan_id)
            if event is None:
                return
            table = event.table
            PLANS_COMMITTED.labels(table, event.kind).inc()
            REWRITTEN_BYTES.labels(table).inc(outcome.written_bytes)
            if not outcome.merged_seq_advanced:
                return  # a merge of runs, or a fold that left runs: no commit compacted
            latency = COMPACTION_LATENCY.labels(table)
            waits = (
                compaction_latencies(self.conn, outcome.plan_id)
                if outcome.event is None
                else merge_latencies(
                    self.conn,
                    event.table_id,
                    event.partition_key,
                    outcome.from_merged_seq,
                    event.max_merged_seq,
                    event.committed_at,
                )
            )
            for seconds in waits:
                latency.observe(seconds)
        except Exception as exc:  # a metric must never undo the handling of a commit
            kind = "transient" if is_transient(exc) else "unexpected"
            with_context(log, plan=outcome.plan_id).warning(
                "metrics not recorded (%s): %r", kind, exc
            )

    def sweep(self) -> list[int]:
        """Commit every complete plan (their task-result events may have been lost),
        and apply retention when it is due."""
        plans = committable_plans(self.conn)
        for table_plans in plans:
            self._settled(compaction.commit_all(self.conn, table_plans))
        self._expire_when_due()
        return [plan_id for table_plans in plans for plan_id in table_plans]

    def _expire_when_due(self) -> None:
        """Retention, table by table, for at most ``expiry_turn`` seconds a sweep: a
        round over every table starts every ``expire_every`` seconds (listing storage
        too once ``sweep_every`` has passed) and goes on at the next sweep. A table
        whose turn fails on database weather is tried again first at the next sweep."""
        now = time.monotonic()
        if not self._expiring:
            if self._last_expiry is not None and now - self._last_expiry < self.expire_every:
                return
            self._last_expiry = self._round_started = now
            self._listing = self._last_sweep is None or now - self._last_sweep >= self.sweep_every
            self._listed_all = True
            self._expiring = table_names(self.conn)
        while self._expiring:
            name = self._expiring[0]
            try:
                expire(self.conn, name, list_storage=self._listing)
            except ConfigError:
                pass  # dropped since the round began
            except FirnError as exc:
                # Storage is deleted before rows, so the next round finishes what this
                # left; retention is housekeeping and must not stop plans from committing.
                self._listed_all = False
                log.warning(
                    "file expiry of %s failed, retried in %.0fs: %s", name, self.expire_every, exc
                )
            self._expiring.pop(0)
            if time.monotonic() - now >= self.expiry_turn:
                break
        if not self._expiring and self._listing and self._listed_all:
            self._last_sweep = self._round_started

    def _announce(self, outcomes: Sequence[PlanCommit]) -> None:
        """One compaction event per plan (plans committed together share a snapshot),
        remembered once acknowledged: another task-result event of a plan this
        process announced needs no second announcement. After a restart the memory is
        empty, so a redelivered event announces its plan again: a crash between a
        commit and its announcement loses nothing. A plan just committed carries its
        event; one committed earlier has it read back."""
        events = [
            e
            for o in outcomes
            if (e := o.event or compaction_event(self.conn, o.plan_id)) is not None
        ]
        for event in events:
            key = f"{event.table}/{event.partition_key}".encode()
            self.producer.produce(self.topic, key=key, value=event.to_json())
        if not events:
            return
        if self.producer.flush(30) > 0:
            raise FirnError("the compaction event was not acknowledged", retryable=True)
        self._announced.add(event.plan_id for event in events)
