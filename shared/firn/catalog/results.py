"""Recording what an attempt of a task did (SPEC 6, SPEC 9): its outputs make the
task Prepared; a failure sends it back to Pending after a backoff while attempts are
left and the error is worth retrying, and fails the plan otherwise.

A result is matched on its attempt: one from an attempt that no longer owns the task
(its lease expired, a newer attempt took over) is stale, and its outputs are recorded
as orphans, never registered. So are the outputs of a result whose plan ended while it
ran, and a result naming files outside its own attempt directory registers nothing.
Recording locks the plan before the task (the lock order of
``firn.catalog.transitions``).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Sequence

from firn.catalog.orphans import record_orphans
from firn.catalog.plans import fail_plan
from firn.catalog.transitions import lock_plans_of, move_task
from firn.model.states import Actor, PlanState, TaskState
from firn.model.tasks import OutputFile, TaskResult, TaskSpec
from firn.postgres.connection import Connection

RETRY_BACKOFF_SECONDS = 5.0
"""Backoff before a task's second attempt; it doubles with each further attempt."""
RETRY_BACKOFF_MAX_SECONDS = 300.0


def retry_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next."""
    return float(min(RETRY_BACKOFF_SECONDS * 2.0 ** (attempt - 1), RETRY_BACKOFF_MAX_SECONDS))


def record_result(conn: Connection, result: TaskResult, max_attempts: int) -> str:
    """Record one attempt's outcome; returns ``prepared``, ``retry``, ``failed`` (the
    plan failed: no attempts left, or the error is not retryable) or ``stale`` (this
    attempt no longer owns the task; its outputs are recorded as orphans)."""
    return record_results(conn, [result], max_attempts)[0]


def record_results(conn: Connection, results: Sequence[TaskResult], max_attempts: int) -> list[str]:
    """``record_result`` for a batch in one transaction, the outcomes in order: one
    commit instead of one per task (a batch's plans are locked first, in plan order)."""
    with conn.transaction():
        lock_plans_of(conn, [r.task_id for r in results])
        return [_record(conn, r, max_attempts) for r in results]


def _record(conn: Connection, result: TaskResult, max_attempts: int) -> str:
    stray = _outputs_outside_attempt(conn, result)
    if stray:
        # Never registered, and never deleted either: such a path may be a live file.
        result = dataclasses.replace(
            result, outputs=(), error=f"outputs outside the attempt directory: {stray}"
        )
    if result.ok:
        outputs = json.dumps([o.to_dict() for o in result.outputs])
        moved = move_task(
            conn,
            result.task_id,
            TaskState.EXECUTING,
            TaskState.PREPARED,
            by=Actor.DISPATCHER,
            attempt=result.attempt,
            reason=f"{len(result.outputs)} files, {result.rows_written} rows",
            updates={"outputs": outputs, "lease_owner": None, "lease_expires": None},
        )
        if moved is not None:
            if _plan_state(conn, result.task_id) in (PlanState.FAILED, PlanState.REPLACED):
                # It finished after its plan gave up: the plan never commits it.
                _orphans_of(conn, result.task_id, result.outputs, "plan ended first")
            return "prepared"
        _orphans_of(conn, result.task_id, result.outputs, "stale attempt")
        return "stale"
    moved = move_task(
        conn,
        result.task_id,
        TaskState.EXECUTING,
        TaskState.FAILED,
        by=Actor.DISPATCHER,
        attempt=result.attempt,
        reason=(result.error or "")[:500],
        updates={"error": result.error, "lease_owner": None, "lease_expires": None},
    )
    if moved is None:
        return "stale"
    if result.retryable and result.attempt < max_attempts:
        backoff = retry_backoff(result.attempt)
        move_task(
            conn,
            result.task_id,
            TaskState.FAILED,
            TaskState.PENDING,
            by=Actor.DISPATCHER,
            reason=f"retry after {backoff:.0f}s",
        )
        conn.execute(
            "UPDATE compaction_task SET not_before = now() + make_interval(secs => %s) "
            "WHERE task_id = %s",
            (backoff, result.task_id),
        )
        return "retry"
    why = (
        f"failed {result.attempt} times"
        if result.retryable
        else f"failed with a non-retryable error on attempt {result.attempt}"
    )
    reason = f"task {result.task_id} {why}: {result.error}"
    fail_plan(conn, _plan_of(conn, result.task_id), reason, by=Actor.DISPATCHER)
    return "failed"


def _outputs_outside_attempt(conn: Connection, result: TaskResult) -> list[str]:
    """Output paths of ``result`` that are not under its own attempt directory (the
    only place an attempt may write, inside the table's location): a forged or broken
    result must not register, or later delete, another file of the table."""
    if not result.outputs:
        return []
    row = conn.execute(
        "SELECT spec FROM compaction_task WHERE task_id = %s", (result.task_id,)
    ).fetchone()
    if row is None:
        return [o.path for o in result.outputs]
    own = TaskSpec.from_dict(row[0]).output_dir(result.attempt) + "/"
    return [
        o.path
        for o in result.outputs
        if not o.path.startswith(own) or posixpath.normpath(o.path) != o.path
    ]


def _plan_state(conn: Connection, task_id: int) -> PlanState:
    row = conn.execute(
        "SELECT p.state FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE t.task_id = %s",
        (task_id,),
    ).fetchone()
    assert row is not None
    return PlanState(row[0])


def _plan_of(conn: Connection, task_id: int) -> int:
    row = conn.execute(
        "SELECT plan_id FROM compaction_task WHERE task_id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _orphans_of(conn: Connection, task_id: int, outputs: Sequence[OutputFile], reason: str) -> None:
    row = conn.execute(
        "SELECT p.table_id FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE t.task_id = %s",
        (task_id,),
    ).fetchone()
    if row is None:
        return
    record_orphans(conn, int(row[0]), [o.path for o in outputs], reason)
