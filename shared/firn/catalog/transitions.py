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

import itertools
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
    sets = ["state = %s", "updated_at = now()", *_timing_sets(old, new)]
    params: list[Any] = [new.value]
    if new_attempt:
        sets.append("attempt = attempt + 1")
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


def move_tasks(
    conn: Connection,
    tasks: Sequence[tuple[int, int]],
    old: TaskState,
    new: TaskState,
    *,
    by: Actor,
    reason: str = "",
) -> set[int]:
    """``move_task`` for several tasks, each ``(task_id, attempt)`` moved only if it is
    in ``old`` at that attempt, in one statement with their history rows (a commit of
    several plans moved their tasks one statement each); the ids of those that moved."""
    TASK.accept(old, new, by=by)
    if not tasks:
        return set()
    sets = ", ".join(["state = %s", "updated_at = now()", *_timing_sets(old, new)])
    rows = conn.execute(
        "WITH wanted AS (SELECT * FROM unnest(%s::bigint[], %s::int[]) AS w(task_id, attempt)), "
        f"moved AS (UPDATE compaction_task t SET {sets} FROM wanted w "
        "WHERE t.task_id = w.task_id AND t.attempt = w.attempt AND t.state = %s "
        "RETURNING t.task_id, t.attempt), "
        f"{_HISTORY.format(machine='task', entity='task_id')} SELECT task_id FROM moved",
        (
            [t for t, _ in tasks],
            [a for _, a in tasks],
            new.value,
            old.value,
            str(old),
            new.value,
            reason,
        ),
    ).fetchall()
    return {int(r[0]) for r in rows}


def _timing_sets(old: TaskState, new: TaskState) -> list[str]:
    """Executor time per table, for the dispatchers' quotas (firn.catalog.claiming)."""
    if new is TaskState.EXECUTING:
        return ["started_at = now()", "finished_at = NULL"]
    if old is TaskState.EXECUTING:
        return ["finished_at = now()"]
    return []


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


def move_plans(
    conn: Connection,
    plan_ids: Sequence[int],
    path: Sequence[PlanState],
    *,
    by: Actor,
    reasons: Sequence[str],
    committed_snapshot: int | None = None,
) -> set[int]:
    """Move the plans that are in ``path[0]`` along ``path`` to its last state in one
    statement, a history row per step (``reasons``, one a step), setting
    ``committed_snapshot`` when given; the ids of those that moved. A commit of
    several plans moved each through Committing to Committed in two statements."""
    steps = list(itertools.pairwise(path))
    if len(reasons) != len(steps):
        raise ValueError(f"{len(steps)} steps along {list(path)}, {len(reasons)} reasons")
    for old, new in steps:
        PLAN.accept(old, new, by=by)
    if not plan_ids or not steps:
        return set()
    rows = conn.execute(
        "WITH moved AS (UPDATE compaction_plan SET state = %s, updated_at = now(), "
        "committed_snapshot = coalesce(%s, committed_snapshot) "
        "WHERE plan_id = ANY(%s) AND state = %s RETURNING plan_id), "
        "steps AS (SELECT * FROM unnest(%s::int[], %s::text[], %s::text[], %s::text[]) "
        "AS s(step, from_state, to_state, reason)), "
        "history AS (INSERT INTO state_transition "
        "(machine, entity_id, from_state, to_state, attempt, reason) "
        "SELECT 'plan', m.plan_id, s.from_state, s.to_state, 0, s.reason "
        "FROM moved m CROSS JOIN steps s ORDER BY m.plan_id, s.step) "
        "SELECT plan_id FROM moved",
        (
            path[-1].value,
            committed_snapshot,
            list(plan_ids),
            path[0].value,
            list(range(len(steps))),
            [str(old) for old, _ in steps],
            [new.value for _, new in steps],
            list(reasons),
        ),
    ).fetchall()
    return {int(r[0]) for r in rows}


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
