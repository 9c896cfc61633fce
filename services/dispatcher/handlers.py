"""The executor-dispatcher's handler and sweep (design §6).

A plan-task event is a wake-up: the dispatcher claims (Pending -> Executing with a
lease and a new attempt) the claimable tasks with the highest plan priority, up to
``dispatcher.max-concurrent-tasks`` and within its memory budget
(``firn.model.permits``), and runs them as ONE Spark job of one table, or, when they
are small, on its own merge processes, several small tables' tasks at once. While the
job runs, a heartbeat thread (on its own catalog connection) extends the leases. The
batch is claimed in one transaction and each table's results are recorded in one
(each Prepared, or Failed and back to Pending for a retry, or its plan fails), then a
task-result event per task goes out.

The event is only a wake-up: what runs, and its inputs, come from the catalog; an
event that disagrees with the catalog row of its ``task_id`` is dead-lettered
(``firn.catalog.event_rows``). A wake-up that finds nothing claimable does nothing. The sweep
returns tasks whose lease expired to Pending, and re-announces Pending tasks nobody
touched for a while: lost events, and retries once their backoff has passed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Producer

import firn
from firn.catalog.claiming import WaitingTask, claimable_tasks, stale_waiting_tasks
from firn.catalog.event_rows import task_named
from firn.catalog.leasing import expire_leases, extend_lease
from firn.catalog.plans import plan_place
from firn.catalog.transitions import move_task
from firn.engine import compaction
from firn.engine.execution import Claim, Runner
from firn.engine.kernel import KernelLimits
from firn.errors import FirnError
from firn.events.dead_letters import bounded
from firn.events.plans import PlanTaskEvent
from firn.events.tasks import TaskResultEvent
from firn.kafka import Topics
from firn.logs import with_context
from firn.model.permits import choose_batch
from firn.model.states import Actor, TaskState
from firn.model.tasks import TaskResult
from firn.observability.instruments import PLANS_FAILED, TASK_DURATION
from firn.postgres.connection import ReconnectingConnection
from firn.postgres.retry import is_transient
from firn_services.recent import Recent, TaskKey

log = logging.getLogger(__name__)

CANDIDATES_PER_TASK = 4
"""Claimable tasks read per batch slot: enough to fill a batch from one table when
the top of the queue mixes tables."""


PREPARED_REMEMBERED = 10_000
"""Task attempts whose Prepared result the dispatcher remembers: far more than the
wake-ups of one batch are spread over."""


class Dispatcher:
    """Claims, runs and records tasks; owns a catalog, a producer and a runner."""

    def __init__(
        self,
        catalog: firn.Catalog,
        producer: Producer,
        topics: Topics,
        runner: Runner,
        owner: str,
    ) -> None:
        self.catalog = catalog
        self.producer = producer
        self.topics = topics
        self.runner = runner
        self.owner = owner
        self.limits = KernelLimits.from_settings(catalog.settings)
        self._groups = ThreadPoolExecutor(
            max(1, catalog.settings.dispatcher_local_processes), thread_name_prefix="firn-batch"
        )
        self._prepared: Recent[TaskKey] = Recent(PREPARED_REMEMBERED)
        """The tasks this process ran to Prepared, as the plan-task events that
        announced them name them (the attempt before the claim). A table's tasks are
        claimed as one batch at the first of their wake-ups; each later one agrees
        with what this process wrote, so it needs no reading of its task to be
        checked, only the queue's (it still wakes the dispatcher for whatever else is
        claimable). An event that differs in any field is checked as any other."""

    def close(self) -> None:
        """Stop the threads that run a batch's tables at once (after the batch in
        hand, if any)."""
        self._groups.shutdown(wait=True)

    def plan_task(self, event: PlanTaskEvent) -> None:
        """A wake-up: run the batch the catalog says comes first (which need not hold
        the event's own task; a later wake-up or the sweep gets to that one)."""
        if TaskKey.of(event) not in self._prepared:
            task_named(self.catalog.conn, event)
        conn = self.catalog.conn
        settings = self.catalog.settings
        most = settings.dispatcher_max_concurrent_tasks
        batch = choose_batch(
            claimable_tasks(conn, CANDIDATES_PER_TASK * most),
            most,
            settings.dispatcher_memory_budget,
            settings.executor_memory_budget,
            settings.dispatcher_local_bytes,
        )
        if not batch:
            return  # nothing claimable: others have it, or retries are backing off
        tables = {t: self.catalog.table_by_id(t) for t in {c.table_id for c in batch}}
        batch = [c for c in batch if tables[c.table_id] is not None]  # dropped: never runs
        if not batch:
            return
        lease = max(t.properties.task_lease for t in tables.values() if t is not None)
        claims = compaction.claim(conn, [t.task_id for t in batch], self.owner, lease)
        if not claims:
            return  # another dispatcher claimed them first
        table_of = {c.task_id: c.table_id for c in batch}
        by_table: dict[int, list[Claim]] = {}
        for claim in claims:
            by_table.setdefault(table_of[claim[0].task_id], []).append(claim)
        groups = []
        for table_id, group in by_table.items():
            table = tables[table_id]
            assert table is not None
            groups.append((table, group))
        with _Heartbeat(settings, claims, self.owner, lease):
            ran = self._run(groups)
        for (table, group), results in zip(groups, ran, strict=True):
            self._record(table, group, results)
        self._flush()

    def _run(self, groups: Sequence[tuple[firn.Table, Sequence[Claim]]]) -> list[list[TaskResult]]:
        """Each table's run as the runner knows it. A batch of several tables is a local
        one (``firn.model.permits`` mixes tables only there): their runs go at once, so
        the merge workers are not left idle while one small table's few tasks finish
        (run one after another, a batch of eight one-task tables kept one of them busy)."""
        if len(groups) == 1:
            table, group = groups[0]
            return [compaction.run(self.runner, table.definition, group, self.limits)]
        futures = [
            self._groups.submit(compaction.run, self.runner, table.definition, group, self.limits)
            for table, group in groups
        ]
        return [future.result() for future in futures]

    def _record(
        self, table: firn.Table, claims: Sequence[Claim], results: Sequence[TaskResult]
    ) -> None:
        """Record one table's results (one transaction) and announce each."""
        partitions = {spec.task_id: (spec.plan_id, spec.partition_key) for spec, _ in claims}
        outcomes = compaction.record(self.catalog.db, results, table.properties.task_max_attempts)
        for result, outcome in zip(results, outcomes, strict=True):
            plan_id, partition = partitions[result.task_id]
            if outcome == "prepared":
                self._prepared.add(
                    [
                        TaskKey(
                            result.task_id,
                            result.attempt - 1,  # the event's: before the claim
                            plan_id,
                            table.table_id,
                            table.name,
                            partition,
                        )
                    ]
                )
            TASK_DURATION.labels(table.name, outcome).observe(result.seconds)
            if outcome == "failed":
                PLANS_FAILED.labels(table.name, "task").inc()
            self._publish(
                TaskResultEvent(
                    table=table.name,
                    table_id=table.table_id,
                    partition_key=partition,
                    plan_id=plan_id,
                    task_id=result.task_id,
                    attempt=result.attempt,
                    outcome=outcome,  # type: ignore[arg-type]
                    error=bounded(result.error) if result.error else None,
                    rows_written=result.rows_written,
                    seconds=result.seconds,
                ),
                self.topics.task_results,
                f"{table.name}/{partition}",
            )

    def sweep(self, min_age_seconds: float = 60.0) -> list[int]:
        """Expire leases and announce those tasks again at once (their executor is
        gone); announce Init and Pending tasks untouched for ``min_age_seconds``
        (Init ones are then Pending)."""
        conn = self.catalog.conn
        expired = expire_leases(conn)
        if expired:
            log.warning("leases expired, tasks back to Pending: %s", expired)
        waiting = stale_waiting_tasks(conn, min_age_seconds, now_due=expired)
        for task in waiting:
            self._announce(task)
        self._flush()
        for task in waiting:
            if task.state == TaskState.INIT:  # the planner died before releasing it
                move_task(
                    conn,
                    task.task_id,
                    TaskState.INIT,
                    TaskState.PENDING,
                    by=Actor.SWEEPER,
                    reason="swept",
                )
        return [t.task_id for t in waiting]

    def _announce(self, task: WaitingTask) -> None:
        place = plan_place(self.catalog.conn, task.plan_id)
        if place is None:
            return
        self._publish(
            task.event(place.table, place.table_id),
            self.topics.plan_tasks,
            f"{place.table}/{task.partition_key}",
        )

    def _publish(self, event: PlanTaskEvent | TaskResultEvent, topic: str, key: str) -> None:
        self.producer.produce(topic, key=key.encode(), value=event.to_json())

    def _flush(self) -> None:
        if self.producer.flush(30) > 0:
            raise FirnError("events were not acknowledged", retryable=True)


class _Heartbeat:
    """Extends the leases of running claims every third of the lease, from a thread
    with its own connection (a psycopg connection is not shared across threads)."""

    def __init__(
        self, settings: firn.FirnSettings, claims: Sequence[Claim], owner: str, lease: float
    ) -> None:
        self._settings = settings
        self._claims = [(spec.task_id, attempt) for spec, attempt in claims]
        self._owner = owner
        self._lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="firn-lease", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        db = ReconnectingConnection(self._settings)
        wait = self._lease / 3
        try:
            while not self._stop.wait(wait):
                try:
                    for task_id, attempt in self._claims:
                        if not extend_lease(db.conn, task_id, attempt, self._owner, self._lease):
                            with_context(log, task=task_id, attempt=attempt).warning(
                                "lost its lease"
                            )
                    wait = self._lease / 3
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    # The database is away: try again soon, the lease is still running.
                    log.warning("lease heartbeat failed, retrying: %r", exc)
                    wait = min(self._lease / 3, 2.0)
        finally:
            db.close()
