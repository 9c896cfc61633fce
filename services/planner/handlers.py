"""The planner's one handler: a plan request becomes a stored plan whose tasks are
released (Init -> Pending) and then announced on firn.plan-tasks.

Idempotent by construction: a repeated or late request finds the partition's open
plan (``covered``/``busy``) or nothing to do. Because a crash can fall between
storing, releasing and announcing, a skipped request releases the open plan's Init
tasks and announces them, and re-announces its Pending ones unless the plan is only
queued or this process announced them already (the dispatcher's sweep, a minute on,
announces them too): duplicate plan-task events are harmless, since only one claim
of a Pending task can win, but each wakes a dispatcher for nothing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from confluent_kafka import Producer

import firn
from firn.catalog.claiming import waiting_tasks
from firn.catalog.event_rows import requested_partition
from firn.catalog.files import partitions_of
from firn.catalog.metrics import partition_metrics, partition_states
from firn.catalog.plans import open_plans
from firn.catalog.transitions import move_tasks
from firn.engine import compaction
from firn.engine.planning import view_now
from firn.errors import EventMismatchError, FirnError
from firn.events.plans import PlanRequestEvent
from firn.logs import with_context
from firn.model.plans import PlanRecord, PlanSkipped
from firn.model.states import Actor, TaskState
from firn.model.tasks import Kind
from firn.model.triggers import PartitionMetrics, decide, score, too_many_small_base_files
from firn_services.recent import Recent

log = logging.getLogger(__name__)

ANNOUNCED_REMEMBERED = 10_000
"""Task attempts whose announcement the planner remembers: a request its partition's
open plan covers announces only the tasks this process has not (after a restart, all
of them again, which covers a crash between releasing and announcing). In a fleet,
most requests are covered: the plan was gathered with another partition's request,
and every commit to the partition asks again until it runs."""

GATHER_MAX_PARTITIONS = 64
"""Partitions a table may have for a request to gather its other due ones: gathering
reads every partition's metrics, which a small table's request pays for at once and
a large table's should not."""


class Planner:
    """Plans partitions on request; owns a catalog and a producer."""

    def __init__(self, catalog: firn.Catalog, producer: Producer, topic: str) -> None:
        self.catalog = catalog
        self.producer = producer
        self.topic = topic
        self._announced: Recent[tuple[int, int]] = Recent(ANNOUNCED_REMEMBERED)
        """(task, attempt) pairs this process announced."""
        self._announced_plans: Recent[int] = Recent(ANNOUNCED_REMEMBERED)
        """Plans whose every waiting task this process announced: a request such a
        plan covers needs nothing more than the check that it still covers it. A task
        retried since is announced by the dispatcher's sweep once its backoff passes."""

    def plan_request(self, request: PlanRequestEvent) -> None:
        """Plan the partition the request names, from the catalog alone: the request
        says which partition, the catalog says what to merge. A request for a
        partition or seq the catalog does not have goes to the DLQ."""
        view = requested_partition(self.catalog.conn, request)
        if request.max_seq > view.greatest_seq:
            raise EventMismatchError(
                f"plan-request event names seq {request.max_seq} of {request.table} "
                f"{request.partition_key!r}, beyond the greatest committed there "
                f"({view.greatest_seq})"
            )
        # A re-bucketing step plans from the catalog alone: a full plan committed up
        # to this seq may have been only the previous step.
        served = None if request.kind == "full" and request.scope == "due" else view.served_by
        covering = view.open_plan  # the partition's open plan, if it covers the request
        if covering is not None and (
            covering.kind != request.kind or covering.to_seq < request.max_seq
        ):
            covering = None
        if served is None and covering is not None and covering.plan_id in self._announced_plans:
            # Planned and announced here (often gathered with another partition's
            # request): the one statement above answers it.
            with_context(log, table=request.table, partition=repr(request.partition_key)).info(
                "request up to seq %d covered by plan %d", request.max_seq, covering.plan_id
            )
            return
        table = self.catalog.table_by_id(request.table_id)
        if table is None:
            log.warning("plan request for dropped table %s ignored", request.table)
            return
        here = with_context(log, table=table.name, partition=repr(request.partition_key))
        # The partition's metrics, read from the catalog at most once for this request.
        now = functools.cache(lambda: self._partition_now(table, request.partition_key))
        if served is not None and self._small_base_due(table, request, now):
            served = None  # no seq answers it: the plan that reached max_seq left them
        if served is not None:
            # Replayed or late: metrics asks again after every compaction if still due.
            here.info("request up to seq %d already served by plan %d", request.max_seq, served)
            return
        if covering is not None:
            # Planned already (often gathered with another partition's request): what
            # drafting it again would find, without reading its files to find it.
            here.info("request up to seq %d covered by plan %d", request.max_seq, covering.plan_id)
            self._announce(table, [request.partition_key])
            return
        if not self._still_due(table, request, now):
            # Replayed or late: something since (a merge of another kind, a fold of the
            # units that were due, a plan it queued behind) took the partition back
            # under its triggers without reaching the request's seq. A major request
            # folds every unit when none is due, so planning it would fold the runs the
            # triggers leave to collect. Metrics asks again once the partition is due.
            here.info("request up to seq %d no longer due", request.max_seq)
            return
        outcome = compaction.plan(
            self.catalog.conn,
            table,
            request.partition_key,
            Kind(request.kind),
            reason={"trigger": "metrics", "reasons": request.reasons},
            score=request.score,
            scope=request.scope,
            # A waiting plan is left to run: replanning it at every request made a
            # backlogged fleet plan its partitions over and over and run few of them.
            replace_waiting=False,
        )
        if outcome is None:
            here.info("nothing to compact")
            return
        if isinstance(outcome, PlanSkipped):
            here.info("%s", outcome.reason)
            if outcome.queued:
                # Its plan was announced when stored; under a backlog every commit
                # to the partition asks again, and announcing the same waiting tasks
                # at each request only woke dispatchers for nothing.
                self._announce(table, [request.partition_key], released_only=True)
                return
        elif isinstance(outcome, PlanRecord):
            here.info("plan %d with %d task(s)", outcome.plan_id, len(outcome.tasks))
            self._announce(table, [request.partition_key, *self._gather(table, request)])
            return
        self._announce(table, [request.partition_key])

    def _gather(self, table: firn.Table, request: PlanRequestEvent) -> list[str]:
        """Plan the table's other due partitions with the request's, up to
        ``compaction.gather-partitions`` in all, most in need first; the partitions
        planned. A small table's partitions fill up together (a commit touches most
        of them), and their plans, run and committed together, pay a plan's fixed
        costs (the transactions, the snapshot, the events) once rather than once a
        partition. A table of more than ``GATHER_MAX_PARTITIONS`` partitions is not
        read whole for it."""
        most = table.properties.gather_partitions
        conn = self.catalog.conn
        if most <= 1 or len(partitions_of(conn, table.table_id)) > GATHER_MAX_PARTITIONS:
            return []
        planned = open_plans(conn, table.table_id)
        due: list[tuple[float, str, Kind, list[str]]] = []
        for key, metrics in partition_metrics(conn, table.table_id, table.properties).items():
            decision = decide(metrics, table.properties)
            if key in planned or decision.kind is None:
                continue
            need = score(metrics, table.properties)
            due.append((need, key, decision.kind, list(decision.reasons)))
        if not due:
            return []
        view = view_now(conn, table)  # one reading of the table for every gathered plan
        gathered = []
        for need, key, kind, reasons in sorted(due, key=lambda d: (-d[0], d[1]))[: most - 1]:
            outcome = compaction.plan(
                conn,
                table,
                key,
                kind,
                reason={"trigger": "gathered", "with": request.partition_key, "reasons": reasons},
                score=need,
                scope="due",
                replace_waiting=False,
                view=view,
            )
            if isinstance(outcome, PlanRecord):
                gathered.append(key)
        if gathered:
            with_context(log, table=table.name).info(
                "gathered %d partition(s) with %r", len(gathered), request.partition_key
            )
        return gathered

    def _still_due(
        self,
        table: firn.Table,
        request: PlanRequestEvent,
        partition_now: Callable[[], PartitionMetrics | None],
    ) -> bool:
        """Whether the partition's triggers still ask for a compaction, read from the
        catalog for that partition alone (a manual request, scope ``all``, always does)."""
        if request.scope != "due":
            return True
        now = partition_now()
        return now is not None and decide(now, table.properties).kind is not None

    def _small_base_due(
        self,
        table: firn.Table,
        request: PlanRequestEvent,
        partition_now: Callable[[], PartitionMetrics | None],
    ) -> bool:
        """Whether the partition's small base files pass the small-file rule now: a
        major due for them has no unmerged seq, so a plan reaching ``max_seq`` does
        not make the request stale."""
        if request.kind != "major" or request.scope != "due":
            return False
        now = partition_now()
        return now is not None and too_many_small_base_files(now, table.properties)

    def _partition_now(self, table: firn.Table, key: str) -> PartitionMetrics | None:
        """One partition's metrics read from the catalog now (the partition alone, not
        the table: a fleet's table may have thousands); None if it has no files."""
        now = partition_states(self.catalog.conn, table.table_id, table.properties, [key])
        return now[key].metrics if key in now else None

    def _announce(
        self, table: firn.Table, partitions: list[str], *, released_only: bool = False
    ) -> None:
        """Release every waiting task of the partitions' open plans, then publish the
        ones released now and the Pending ones this process has not announced (with
        ``released_only``, only those released now: a Pending task whose event was lost
        is the dispatcher's sweep's). Released first: an idle dispatcher reads the
        event within milliseconds, and one that found its task still Init would do
        nothing (the event is a wake-up), leaving the task to the sweep a minute later."""
        conn = self.catalog.conn
        announced, released = [], []
        waiting = waiting_tasks(conn, table.table_id, partitions)
        for task in waiting:
            if task.state == TaskState.INIT:
                released.append(task)
            elif released_only or (task.task_id, task.attempt) in self._announced:
                continue
            announced.append(task)
        move_tasks(
            conn,
            [(task.task_id, task.attempt) for task in released],
            TaskState.INIT,
            TaskState.PENDING,
            by=Actor.PLANNER,
            reason="announced",
        )
        for task in announced:
            key = f"{table.name}/{task.partition_key}".encode()
            event = task.event(table.name, table.table_id)
            self.producer.produce(self.topic, key=key, value=event.to_json())
        if self.producer.flush(30) > 0:
            raise FirnError("plan-task events were not acknowledged", retryable=True)
        self._announced.add((task.task_id, task.attempt) for task in announced)
        left = {t.plan_id for t in waiting if (t.task_id, t.attempt) not in self._announced}
        self._announced_plans.add({t.plan_id for t in waiting} - left)
