"""One compaction, as the steps every caller takes: plan, release, claim, run,
record, commit.

``firn.compact`` takes them all in one process (``plan``, ``release``, then
``run_to_results`` and ``settle``); the services take them apart, each woken by an
event: the planner plans and releases, the dispatcher claims, runs and records, the
committer commits. Each step is one catalog transaction or one runner call and moves
the task and plan rows the same way whoever takes it, so a compaction run by hand
and one run by the services differ only in who wakes whom. The rows' moves
themselves are the catalog's (``firn.catalog.claiming``, ``results``,
``compactions``); no step here writes SQL.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from firn.catalog.claiming import claim_tasks, release_tasks
from firn.catalog.compactions import PlanCommit, commit_plan, commit_plans, ready_plans_beside
from firn.catalog.plans import plan_failure
from firn.catalog.results import record_results, retry_backoff
from firn.engine.execution import Claim, Runner
from firn.engine.kernel import KernelLimits
from firn.engine.planning import PlannedTable, PlanningView, plan_now
from firn.engine.policies import Scope
from firn.model.plans import PlanRecord, PlanSkipped
from firn.model.schema import TableSchema
from firn.model.states import PlanOutcome
from firn.model.tasks import Kind, TaskResult
from firn.postgres.connection import Connection, ReconnectingConnection
from firn.postgres.retry import retrying_transient


def plan(
    conn: Connection,
    table: PlannedTable,
    partition: str,
    kind: Kind,
    *,
    scope: Scope = "all",
    reason: Mapping[str, Any] | None = None,
    score: float = 0.0,
    replace_waiting: bool = True,
    view: PlanningView | None = None,
) -> PlanRecord | PlanSkipped | None:
    """Plan ``partition`` with the registry's policy for ``kind`` and ``scope`` and
    store the plan; why none was stored, or None when there is nothing to compact.
    Its tasks wait in Init until released. ``view``: the table as read for planning,
    when several partitions are planned from one reading (``plan_now``)."""
    return plan_now(
        conn,
        table,
        partition,
        kind,
        reason=reason,
        score=score,
        scope=scope,
        replace_waiting=replace_waiting,
        view=view,
    )


def release(conn: Connection, record: PlanRecord) -> None:
    """Init -> Pending for every task of a new plan: anyone may claim them now."""
    release_tasks(conn, record)


def claim(conn: Connection, task_ids: Sequence[int], owner: str, lease: float) -> list[Claim]:
    """Pending -> Executing with a lease, for the tasks nobody got first (in one
    transaction); each claim is the task's spec and its new attempt."""
    return claim_tasks(conn, task_ids, owner, lease)


def run(
    runner: Runner, table: TableSchema, claims: Sequence[Claim], limits: KernelLimits
) -> list[TaskResult]:
    """Merge the claimed tasks of one table: locally or as one Spark job, as the
    ``runner`` does (``firn.engine.execution``)."""
    return runner(table, claims, limits)


def record(
    db: ReconnectingConnection, results: Sequence[TaskResult], max_attempts: int
) -> list[str]:
    """Each result's outcome (``prepared``, ``retry`` or ``failed``), recorded in one
    transaction. A run may outlive the connection it started on (a database restart):
    the results are recorded on a fresh one, retried through the outage, never
    thrown away."""
    return retrying_transient(
        lambda: record_results(db.conn, results, max_attempts),
        what=f"recording the results of tasks {[r.task_id for r in results]}",
    )


def commit(conn: Connection, plan_id: int) -> PlanCommit:
    """Commit ``plan_id`` once every task is Prepared (idempotent: a committed plan
    answers ``already``)."""
    return commit_plan(conn, plan_id)


def commit_all(conn: Connection, plan_ids: Sequence[int]) -> list[PlanCommit]:
    """Commit the ready plans among ``plan_ids`` (plans of one table) together, in one
    transaction and one snapshot; each plan's outcome, in order."""
    return commit_plans(conn, plan_ids)


def commit_with_ready(conn: Connection, plan_id: int) -> list[PlanCommit]:
    """Commit ``plan_id`` and every other plan of its table that is ready, in one
    transaction and one snapshot (``commit_plans``); ``plan_id``'s outcome first.
    The plans of a small table's partitions run together, and committing them
    together pays for the table lock, the snapshot and the transaction once."""
    return commit_plans(conn, [plan_id, *ready_plans_beside(conn, plan_id)])


def settle(conn: Connection, plan_id: int) -> PlanCommit:
    """Commit a plan whose tasks all have results, or report why it failed: a task
    out of attempts, or an error not worth retrying such as a damaged input file."""
    return settle_all(conn, [plan_id])[0]


def settle_all(conn: Connection, plan_ids: Sequence[int]) -> list[PlanCommit]:
    """``settle`` for plans of one table whose tasks all have results: those that
    did not fail are committed together, in one transaction and one snapshot."""
    failed = {p: why for p in plan_ids if (why := plan_failure(conn, p)) is not None}
    committed = commit_plans(conn, [p for p in plan_ids if p not in failed])
    outcomes = {c.plan_id: c for c in committed}
    outcomes.update({p: PlanCommit(p, PlanOutcome.FAILED, reason=why) for p, why in failed.items()})
    return [outcomes[p] for p in plan_ids]


def run_to_results(
    db: ReconnectingConnection,
    table: TableSchema,
    task_ids: Sequence[int],
    runner: Runner,
    limits: KernelLimits,
    *,
    owner: str,
    lease: float,
    max_attempts: int,
) -> list[TaskResult]:
    """Claim, run and record ``task_ids`` until each is Prepared or its plan Failed,
    trying a failed attempt again once its backoff has passed (as the services wait);
    every attempt's result, in order."""
    results: list[TaskResult] = []
    pending = list(task_ids)
    while pending:
        batch = run(runner, table, claim(db.conn, pending, owner, lease), limits)
        results.extend(batch)
        outcomes = record(db, batch, max_attempts)
        retries = [r for r, o in zip(batch, outcomes, strict=True) if o == "retry"]
        pending = [r.task_id for r in retries]
        if retries:
            # Claims are refused until the backoff has passed.
            time.sleep(max(retry_backoff(r.attempt) for r in retries))
    return results
