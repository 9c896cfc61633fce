"""Recording what an attempt of a task did (design §6, design §9): its outputs make the
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
from firn.model.backoff import Backoff
from firn.model.states import TASK, Actor, PlanState, TaskState
from firn.model.tasks import OutputFile, TaskResult, TaskSpec, carries
from firn.postgres.connection import Connection

TASK_BACKOFF = Backoff(first=5.0, cap=300.0)
"""Before a task's second attempt 5 s; it doubles with each further attempt."""


def retry_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next."""
    return TASK_BACKOFF.after(attempt)


def record_result(conn: Connection, result: TaskResult, max_attempts: int) -> str:
    """Record one attempt's outcome; returns ``prepared``, ``retry``, ``failed`` (the
    plan failed: no attempts left, or the error is not retryable) or ``stale`` (this
    attempt no longer owns the task; its outputs are recorded as orphans)."""
    return record_results(conn, [result], max_attempts)[0]


def record_results(conn: Connection, results: Sequence[TaskResult], max_attempts: int) -> list[str]:
    """``record_result`` for a batch in one transaction, the outcomes in order: one
    commit instead of one per task, and what the checks need of the tasks read in one
    query (the batch's plans are locked first, in plan order)."""
    with conn.transaction():
        task_ids = [r.task_id for r in results]
        lock_plans_of(conn, task_ids)
        batch = _BatchRows.read(conn, task_ids)
        if all(_clean(r, batch) for r in results):
            # The usual batch, every task done: one statement for all (a failure may
            # fail a plan midway, so a batch holding one is recorded result by result).
            batch.prepared = _prepare(conn, results)
            batch.all_prepared = True
        return [_record(conn, r, max_attempts, batch) for r in results]


def _clean(result: TaskResult, batch: _BatchRows) -> bool:
    """Whether the result is a success whose outputs all lie in its attempt's directory."""
    return result.ok and not _outputs_outside_attempt(result, batch.specs.get(result.task_id))


def _prepare(conn: Connection, results: Sequence[TaskResult]) -> set[int]:
    """Executing -> Prepared for every clean success of the batch still at its attempt,
    with its outputs, in one statement with their history rows; the tasks that moved."""
    if not results:
        return set()
    TASK.accept(TaskState.EXECUTING, TaskState.PREPARED, by=Actor.DISPATCHER)
    rows = conn.execute(
        "WITH r AS (SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], "
        "%(outputs)s::jsonb[], %(reasons)s::text[]) AS r(task_id, attempt, outputs, reason)), "
        "moved AS (UPDATE compaction_task t SET state = %(new)s, updated_at = now(), "
        "finished_at = now(), outputs = r.outputs, lease_owner = NULL, lease_expires = NULL "
        "FROM r WHERE t.task_id = r.task_id AND t.attempt = r.attempt AND t.state = %(old)s "
        "RETURNING t.task_id, t.attempt, r.reason), "
        "history AS (INSERT INTO state_transition "
        "(machine, entity_id, from_state, to_state, attempt, reason) "
        "SELECT 'task', task_id, %(old)s, %(new)s, attempt, reason FROM moved) "
        "SELECT task_id FROM moved",
        {
            "ids": [r.task_id for r in results],
            "attempts": [r.attempt for r in results],
            "outputs": [json.dumps([o.to_dict() for o in r.outputs]) for r in results],
            "reasons": [f"{len(r.outputs)} files, {r.rows_written} rows" for r in results],
            "new": TaskState.PREPARED.value,
            "old": TaskState.EXECUTING.value,
        },
    ).fetchall()
    return {int(task_id) for (task_id,) in rows}


@dataclasses.dataclass
class _BatchRows:
    """The batch's tasks as the catalog has them. It holds for the transaction, as
    their plans are locked; a plan that a result of the batch fails is marked here."""

    specs: dict[int, TaskSpec]
    plan_of: dict[int, int]
    table_of: dict[int, int]
    """Plan -> table."""
    plan_state: dict[int, PlanState]
    prepared: set[int] = dataclasses.field(default_factory=set)
    """The tasks ``_prepare`` moved to Prepared, when ``all_prepared``."""
    all_prepared: bool = False
    """Whether every result was a clean success, recorded at once (``_prepare``)."""

    @classmethod
    def read(cls, conn: Connection, task_ids: Sequence[int]) -> _BatchRows:
        batch = cls({}, {}, {}, {})
        for task_id, spec, plan_id, state, table_id in conn.execute(
            "SELECT t.task_id, t.spec, t.plan_id, p.state, p.table_id FROM compaction_task t "
            "JOIN compaction_plan p USING (plan_id) WHERE t.task_id = ANY(%s)",
            (list(task_ids),),
        ).fetchall():
            batch.specs[task_id] = TaskSpec.from_dict(spec)
            batch.plan_of[task_id] = plan_id
            batch.table_of[plan_id] = table_id
            batch.plan_state[plan_id] = PlanState(state)
        return batch

    def orphans(
        self, conn: Connection, task_id: int, outputs: Sequence[OutputFile], reason: str
    ) -> None:
        plan_id = self.plan_of.get(task_id)
        if plan_id is not None and outputs:
            paths = [p for o in outputs for p in o.written_paths()]
            record_orphans(conn, self.table_of[plan_id], paths, reason)


def _record(conn: Connection, result: TaskResult, max_attempts: int, batch: _BatchRows) -> str:
    stray = _outputs_outside_attempt(result, batch.specs.get(result.task_id))
    if stray:
        # Never registered, and never deleted either: such a path may be a live file.
        result = dataclasses.replace(
            result, outputs=(), error=f"outputs outside the attempt directory: {stray}"
        )
    if result.ok:
        if not batch.all_prepared and result.task_id not in batch.prepared:
            batch.prepared |= _prepare(conn, [result])
        if result.task_id in batch.prepared:
            batch.prepared.discard(result.task_id)  # a second result of it is stale
            plan_state = batch.plan_state[batch.plan_of[result.task_id]]
            if plan_state in (PlanState.FAILED, PlanState.REPLACED):
                # It finished after its plan gave up: the plan never commits it.
                batch.orphans(conn, result.task_id, result.outputs, "plan ended first")
            return "prepared"
        batch.orphans(conn, result.task_id, result.outputs, "stale attempt")
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
    plan_id = batch.plan_of[result.task_id]
    if fail_plan(conn, plan_id, reason, by=Actor.DISPATCHER):
        batch.plan_state[plan_id] = PlanState.FAILED
    return "failed"


def _outputs_outside_attempt(result: TaskResult, spec: TaskSpec | None) -> list[str]:
    """Output paths of ``result`` that are not under its own attempt directory (the
    only place an attempt may write, inside the table's location): a forged or broken
    result must not register, or later delete, another file of the table. A move
    task's result may instead name its own change files, exactly as
    ``TaskSpec.moved_outputs`` describes them, and nothing else; a fold's result may
    name its own base inputs as kept, each once and as it is, with its vector or a
    larger one written in the attempt directory (``firn.engine.vectors``)."""
    if not result.outputs:
        return []
    if spec is None:
        return [o.path for o in result.outputs]
    moved = spec.moved_outputs()
    if moved and result.outputs == moved:
        return []
    own = spec.output_dir(result.attempt) + "/"
    inputs = {f.file_id: f for f in spec.base_files} if spec.kind != "minor" else {}
    stray = []
    for o in result.outputs:
        if o.carried:
            f = inputs.pop(o.replaces, None) if o.replaces is not None else None
            if f is None or not carries(o, f, own):
                stray.append(o.path)
        elif not o.path.startswith(own) or posixpath.normpath(o.path) != o.path:
            stray.append(o.path)
    return stray
