"""Every state change of a task or plan in Postgres: a compare-and-set on the old
state, with its history row (design §5 step 6, design §9).

A move is ``UPDATE ... SET state = new WHERE id = ? AND state = old [AND attempt = ?]``,
its history row inserted by the same statement (one round trip, atomic on its own):
when a redelivered or stale event asks for a move that already happened (or that a
newer attempt overtook), no row matches and the caller learns it was a no-op. The
machine's table (``firn.model.states``) is consulted first, with the actor making the
move, so a move the design does not allow, or not to that actor, is a bug that raises
instead of a silent write.

Lock order, the same in every transaction that takes more than one of these row
locks, so that no two of them can deadlock: the table row (producer commits, plan
commits), then the partition row, then the plan row, then its task rows. Claiming a
task and recording its result therefore lock the plan before the task
(``lock_plans_of``). A deadlock or serialization failure that happens anyway is a
transient error: the whole transaction is retried by its caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from firn.model.states import PLAN, TASK, Actor, PlanState, TaskState
from firn.postgres.connection import Connection

_TASK_COLUMNS = frozenset({"lease_owner", "lease_expires", "outputs", "error"})
"""The columns a move may set along with the state; anything else is a bug."""


def move_task(
    conn: Connection,
    task_id: int,
    old: TaskState,
    new: TaskState,
    *,
    by: Actor,
    reason: str = "",
    attempt: int | None = None,
    new_attempt: bool = False,
    updates: Mapping[str, Any] | None = None,
    lease_seconds: float | None = None,
    due_only: bool = False,
) -> int | None:
    """Move a task if it is in ``old`` (and at ``attempt``, when given; and, with
    ``due_only``, if no retry backoff is running); returns the attempt it is at
    afterwards, or ``None`` when it did not move. ``lease_seconds`` starts a lease
    of that long, on the database's clock."""
    TASK.accept(old, new, by=by)
    updates = dict(updates or {})
    unknown = set(updates) - _TASK_COLUMNS
    if unknown:
        raise ValueError(f"not a task column: {sorted(unknown)}")
    sets = ["state = %s", "updated_at = now()"]
    params: list[Any] = [new.value]
    if new_attempt:
        sets.append("attempt = attempt + 1")
    # Executor time per table, for the dispatchers' quotas (firn.catalog.claiming).
    if new is TaskState.EXECUTING:
        sets += ["started_at = now()", "finished_at = NULL"]
    elif old is TaskState.EXECUTING:
        sets.append("finished_at = now()")
    for column, value in updates.items():
        sets.append(f"{column} = %s")
        params.append(value)
    if lease_seconds is not None:
        sets.append("lease_expires = now() + make_interval(secs => %s)")
        params.append(lease_seconds)
    where = "task_id = %s AND state = %s"
    params += [task_id, old.value]
    if attempt is not None:
        where += " AND attempt = %s"
        params.append(attempt)
    if due_only:
        where += " AND (not_before IS NULL OR not_before <= now())"
    row = conn.execute(
        f"WITH moved AS (UPDATE compaction_task SET {', '.join(sets)} WHERE {where} "
        f"RETURNING task_id, attempt), {_HISTORY.format(machine='task', entity='task_id')} "
        "SELECT attempt FROM moved",
        [*params, str(old), new.value, reason],
    ).fetchone()
    return None if row is None else int(row[0])


def move_plan(
    conn: Connection,
    plan_id: int,
    old: PlanState,
    new: PlanState,
    *,
    by: Actor,
    reason: str = "",
    error: str | None = None,
) -> bool:
    """Move a plan if it is in ``old``; returns whether it moved."""
    PLAN.accept(old, new, by=by)
    row = conn.execute(
        "WITH moved AS (UPDATE compaction_plan SET state = %s, updated_at = now(), "
        "error = coalesce(%s, error) WHERE plan_id = %s AND state = %s "
        f"RETURNING plan_id, 0 AS attempt), {_HISTORY.format(machine='plan', entity='plan_id')} "
        "SELECT plan_id FROM moved",
        (new.value, error, plan_id, old.value, str(old), new.value, reason),
    ).fetchone()
    return row is not None


_HISTORY = (
    "history AS (INSERT INTO state_transition "
    "(machine, entity_id, from_state, to_state, attempt, reason) "
    "SELECT '{machine}', {entity}, %s, %s, attempt, %s FROM moved)"
)
"""The history row of a move, written by the move's own statement: one round trip,
and atomic without a transaction of its own (a statement is), so a move costs the
same inside a claim, a result, a plan or a commit as on its own."""


def record_transition(
    conn: Connection,
    machine: str,
    entity_id: int,
    old: TaskState | PlanState | str,
    new: TaskState | PlanState,
    attempt: int,
    reason: str,
) -> None:
    """The history row of one move (``old`` is ``""`` when a task or plan is born)."""
    conn.execute(
        "INSERT INTO state_transition (machine, entity_id, from_state, to_state, attempt, reason) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (machine, entity_id, str(old), new.value, attempt, reason),
    )


def lock_plans_of(conn: Connection, task_ids: Sequence[int]) -> None:
    """Lock the plans of several tasks before any of the tasks, in plan id order, so
    that two transactions taking plans of a batch each cannot deadlock."""
    conn.execute(
        "SELECT 1 FROM compaction_plan WHERE plan_id IN "
        "(SELECT plan_id FROM compaction_task WHERE task_id = ANY(%s)) "
        "ORDER BY plan_id FOR UPDATE",
        (list(task_ids),),
    )
