"""Plans and tasks in Postgres: creating them, and every state change as a
compare-and-set on the old state with its history row (SPEC 5 step 6, SPEC 9).

A move is ``UPDATE ... SET state = new WHERE id = ? AND state = old [AND attempt = ?]``:
when a redelivered or stale event asks for a move that already happened (or that a
newer attempt overtook), no row matches and the caller learns it was a no-op. The
machine's transition table (``firn.model.states``) is consulted first, so a
move the SPEC does not allow is a bug that raises instead of a silent write.

Lock order, the same in every transaction that takes more than one of these row
locks, so that no two of them can deadlock: the table row (producer commits, plan
commits), then the partition row, then the plan row, then its task rows. Claiming a
task and recording its result therefore lock the plan before the task. A deadlock
or serialization failure that happens anyway is a transient error: the whole
transaction is retried by its caller.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from firn.events.plans import PlanTaskEvent
from firn.model.plans import PlanDraft, PlanRecord, PlanSkipped
from firn.model.states import PLAN, TASK, PlanState, TaskState
from firn.model.tasks import OutputFile, TaskResult, TaskSpec, attempt_dir
from firn.postgres.connection import Connection

OPEN_PLAN_STATES = (PlanState.PLANNED, PlanState.EXECUTING, PlanState.COMMITTING)
BUSY_TASK_STATES = (TaskState.EXECUTING, TaskState.PREPARED)
RETRY_BACKOFF_SECONDS = 5.0
"""Backoff before a task's second attempt; it doubles with each further attempt."""
RETRY_BACKOFF_MAX_SECONDS = 300.0


def retry_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next."""
    return float(min(RETRY_BACKOFF_SECONDS * 2.0 ** (attempt - 1), RETRY_BACKOFF_MAX_SECONDS))


_TASK_COLUMNS = frozenset({"lease_owner", "lease_expires", "outputs", "error"})


def move_task(
    conn: Connection,
    task_id: int,
    old: TaskState,
    new: TaskState,
    *,
    reason: str = "",
    attempt: int | None = None,
    new_attempt: bool = False,
    updates: Mapping[str, Any] | None = None,
) -> int | None:
    """Move a task if it is in ``old`` (and at ``attempt``, when given); returns the
    attempt it is at afterwards, or ``None`` when it was not in that state."""
    TASK.accept(old, new)
    updates = dict(updates or {})
    unknown = set(updates) - _TASK_COLUMNS
    if unknown:
        raise ValueError(f"not a task column: {sorted(unknown)}")
    sets = ["state = %s", "updated_at = now()"]
    params: list[Any] = [new.value]
    if new_attempt:
        sets.append("attempt = attempt + 1")
    for column, value in updates.items():
        sets.append(f"{column} = %s")
        params.append(value)
    where = "task_id = %s AND state = %s"
    params += [task_id, old.value]
    if attempt is not None:
        where += " AND attempt = %s"
        params.append(attempt)
    with conn.transaction():
        row = conn.execute(
            f"UPDATE compaction_task SET {', '.join(sets)} WHERE {where} RETURNING attempt",
            params,
        ).fetchone()
        if row is None:
            return None
        _record(conn, "task", task_id, old, new, int(row[0]), reason)
    return int(row[0])


def move_plan(
    conn: Connection,
    plan_id: int,
    old: PlanState,
    new: PlanState,
    *,
    reason: str = "",
    error: str | None = None,
) -> bool:
    """Move a plan if it is in ``old``; returns whether it moved."""
    PLAN.accept(old, new)
    with conn.transaction():
        row = conn.execute(
            "UPDATE compaction_plan SET state = %s, updated_at = now(), "
            "error = coalesce(%s, error) WHERE plan_id = %s AND state = %s RETURNING plan_id",
            (new.value, error, plan_id, old.value),
        ).fetchone()
        if row is None:
            return False
        _record(conn, "plan", plan_id, old, new, 0, reason)
    return True


def _record(
    conn: Connection,
    machine: str,
    entity_id: int,
    old: TaskState | PlanState | str,
    new: TaskState | PlanState,
    attempt: int,
    reason: str,
) -> None:
    conn.execute(
        "INSERT INTO state_transition (machine, entity_id, from_state, to_state, attempt, reason) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (machine, entity_id, str(old), new.value, attempt, reason),
    )


def create_plan(
    conn: Connection,
    table_id: int,
    location: str,
    draft: PlanDraft,
    *,
    planned_snapshot: int,
    target_file_size: int,
    reason: Mapping[str, Any] | None = None,
    score: float = 0.0,
) -> PlanRecord | PlanSkipped:
    """Persist a plan and its tasks (Init) in one transaction, after the state check:
    skip a partition that is busy or whose open plan already covers the draft's S,
    replace any other open plan."""
    with conn.transaction():
        part = conn.execute(
            "SELECT max_merged_seq FROM catalog_partition WHERE table_id = %s "
            "AND partition_key = %s FOR UPDATE",
            (table_id, draft.partition_key),
        ).fetchone()
        if part is None or int(part[0]) != draft.from_merged_seq:
            return PlanSkipped(draft.partition_key, "stale: the partition was compacted since")
        skipped = _replace_open_plan(conn, table_id, draft)
        if skipped is not None:
            return skipped
        plan_id = conn.execute(
            "INSERT INTO compaction_plan (table_id, partition_key, kind, state, from_merged_seq, "
            "to_seq, planned_snapshot, reason, score) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "RETURNING plan_id",
            (
                table_id,
                draft.partition_key,
                draft.kind,
                PLAN.initial.value,
                draft.from_merged_seq,
                draft.to_seq,
                planned_snapshot,
                json.dumps(dict(reason or {})),
                score,
            ),
        ).fetchone()[0]  # type: ignore[index]
        _record(conn, "plan", plan_id, "", PLAN.initial, 0, "planned")
        specs = []
        for ordinal, task in enumerate(draft.tasks):
            task_id = conn.execute(
                "INSERT INTO compaction_task (plan_id, ordinal, state, spec, input_bytes) "
                "VALUES (%s, %s, %s, '{}', %s) RETURNING task_id",
                (plan_id, ordinal, TASK.initial.value, task.input_bytes),
            ).fetchone()[0]  # type: ignore[index]
            spec = draft.task_spec(
                task,
                plan_id=plan_id,
                task_id=task_id,
                table_id=table_id,
                location=location,
                target_file_size=target_file_size,
            )
            conn.execute(
                "UPDATE compaction_task SET spec = %s WHERE task_id = %s",
                (spec.model_dump_json(), task_id),
            )
            _record(conn, "task", task_id, "", TASK.initial, 0, "planned")
            specs.append(spec)
    return PlanRecord(plan_id, tuple(specs))


def _replace_open_plan(conn: Connection, table_id: int, draft: PlanDraft) -> PlanSkipped | None:
    row = conn.execute(
        "SELECT plan_id, state, to_seq, kind FROM compaction_plan WHERE table_id = %s "
        "AND partition_key = %s AND state = ANY(%s) FOR UPDATE",
        (table_id, draft.partition_key, [s.value for s in OPEN_PLAN_STATES]),
    ).fetchone()
    if row is None:
        return None
    plan_id, state, to_seq, kind = row
    states = [
        TaskState(s)
        for (s,) in conn.execute(
            "SELECT state FROM compaction_task WHERE plan_id = %s", (plan_id,)
        ).fetchall()
    ]
    if state == PlanState.COMMITTING or any(s in BUSY_TASK_STATES for s in states):
        return PlanSkipped(draft.partition_key, f"busy: plan {plan_id} is running")
    if to_seq >= draft.to_seq and kind == draft.kind:
        return PlanSkipped(draft.partition_key, f"covered: plan {plan_id} already reaches S")
    for task_id, task_state in conn.execute(
        "SELECT task_id, state FROM compaction_task WHERE plan_id = %s ORDER BY ordinal",
        (plan_id,),
    ).fetchall():
        move_task(conn, task_id, TaskState(task_state), TaskState.REPLACED, reason="replanned")
    move_plan(conn, plan_id, PlanState(state), PlanState.REPLACED, reason="replanned")
    return None


def release_tasks(conn: Connection, plan: PlanRecord) -> None:
    """Init -> Pending for every task of a new plan (after their events are out)."""
    for spec in plan.tasks:
        move_task(conn, spec.task_id, TaskState.INIT, TaskState.PENDING, reason="published")


def claim_task(
    conn: Connection, task_id: int, owner: str, lease_seconds: float
) -> tuple[TaskSpec, int] | None:
    """Pending -> Executing with a new attempt and a lease; ``None`` if another
    executor got it first (or it is no longer pending)."""
    with conn.transaction():
        _lock_plan_of(conn, task_id)
        backing_off = conn.execute(
            "SELECT 1 FROM compaction_task WHERE task_id = %s AND not_before > now()", (task_id,)
        ).fetchone()
        if backing_off is not None:
            return None  # a retry whose backoff has not passed: the sweep announces it
        attempt = move_task(
            conn,
            task_id,
            TaskState.PENDING,
            TaskState.EXECUTING,
            reason=f"claimed by {owner}",
            new_attempt=True,
            updates={"lease_owner": owner},
        )
        if attempt is None:
            return None
        row = conn.execute(
            "UPDATE compaction_task SET lease_expires = now() + make_interval(secs => %s) "
            "WHERE task_id = %s RETURNING spec, plan_id",
            (lease_seconds, task_id),
        ).fetchone()
        assert row is not None
        spec = TaskSpec.model_validate(row[0])
        move_plan(conn, int(row[1]), PlanState.PLANNED, PlanState.EXECUTING, reason="first claim")
    return spec, attempt


def record_result(conn: Connection, result: TaskResult, max_attempts: int) -> str:
    """Record one attempt's outcome; returns ``prepared``, ``retry``, ``failed`` (the
    plan failed: no attempts left, or the error is not retryable) or ``stale`` (this
    attempt no longer owns the task; its outputs are recorded as orphans)."""
    with conn.transaction():
        _lock_plan_of(conn, result.task_id)
        stray = _outputs_outside_attempt(conn, result)
        if stray:
            # Never registered, and never deleted either: such a path may be a live file.
            result = result.model_copy(
                update={"outputs": (), "error": f"outputs outside the attempt directory: {stray}"}
            )
        if result.ok:
            outputs = json.dumps([o.model_dump() for o in result.outputs])
            moved = move_task(
                conn,
                result.task_id,
                TaskState.EXECUTING,
                TaskState.PREPARED,
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
        fail_plan(conn, _plan_of(conn, result.task_id), reason)
        return "failed"


def _lock_plan_of(conn: Connection, task_id: int) -> None:
    """Lock the plan of a task before the task itself (the lock order above)."""
    conn.execute(
        "SELECT 1 FROM compaction_plan WHERE plan_id = "
        "(SELECT plan_id FROM compaction_task WHERE task_id = %s) FOR UPDATE",
        (task_id,),
    )


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
    own = TaskSpec.model_validate(row[0]).output_dir(result.attempt) + "/"
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


def record_orphans(conn: Connection, table_id: int, paths: Sequence[str], reason: str) -> None:
    """Files no snapshot references; deleted after ``orphan.retention``."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO orphan_file (table_id, path, reason) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            [(table_id, p, reason) for p in paths],
        )


def fail_plan(conn: Connection, plan_id: int, reason: str) -> bool:
    """Fail a plan that cannot commit: its waiting tasks are replaced, its prepared
    outputs become orphans, and the partition is free to be planned again."""
    with conn.transaction():
        row = conn.execute(
            "SELECT table_id, state FROM compaction_plan WHERE plan_id = %s FOR UPDATE",
            (plan_id,),
        ).fetchone()
        if row is None or not PLAN.try_accept(PlanState(row[1]), PlanState.FAILED):
            return False
        table_id, state = int(row[0]), PlanState(row[1])
        tasks = conn.execute(
            "SELECT task_id, state, outputs FROM compaction_task WHERE plan_id = %s",
            (plan_id,),
        ).fetchall()
        for task_id, task_state, outputs in tasks:
            old = TaskState(task_state)
            if old == TaskState.PREPARED:
                move_task(conn, task_id, old, TaskState.FAILED, reason=f"plan failed: {reason}")
                paths = [o["path"] for o in outputs or []]
                record_orphans(conn, table_id, paths, f"plan {plan_id} failed")
            elif TASK.try_accept(old, TaskState.REPLACED):
                move_task(conn, task_id, old, TaskState.REPLACED, reason=f"plan failed: {reason}")
        move_plan(conn, plan_id, state, PlanState.FAILED, reason=reason, error=reason)
    return True


@dataclass(frozen=True)
class WaitingTask:
    """A task of an open plan that no executor holds (Init or Pending)."""

    plan_id: int
    task_id: int
    state: TaskState
    attempt: int
    input_bytes: int

    def event(self, table: str, table_id: int, partition_key: str) -> PlanTaskEvent:
        """The plan-task event that announces it (planner, and the dispatcher's sweep)."""
        return PlanTaskEvent(
            table=table,
            table_id=table_id,
            partition_key=partition_key,
            plan_id=self.plan_id,
            task_id=self.task_id,
            attempt=self.attempt,
            input_bytes=self.input_bytes,
        )


def waiting_tasks(conn: Connection, table_id: int, partition_key: str) -> list[WaitingTask]:
    """The Init and Pending tasks of the partition's open plan, in plan order."""
    rows = conn.execute(
        "SELECT t.plan_id, t.task_id, t.state, t.attempt, t.input_bytes "
        "FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %s AND p.partition_key = %s AND p.state = ANY(%s) "
        "AND t.state = ANY(%s) ORDER BY t.ordinal",
        (
            table_id,
            partition_key,
            [s.value for s in OPEN_PLAN_STATES],
            [TaskState.INIT.value, TaskState.PENDING.value],
        ),
    ).fetchall()
    return [WaitingTask(int(p), int(t), TaskState(s), int(a), int(b)) for p, t, s, a, b in rows]


def extend_lease(
    conn: Connection, task_id: int, attempt: int, owner: str, lease_seconds: float
) -> bool:
    """The executor's heartbeat: push the lease of its running attempt forward.
    ``False`` when the attempt no longer owns the task (expired and reclaimed)."""
    row = conn.execute(
        "UPDATE compaction_task SET lease_expires = now() + make_interval(secs => %s) "
        "WHERE task_id = %s AND attempt = %s AND lease_owner = %s AND state = %s "
        "RETURNING task_id",
        (lease_seconds, task_id, attempt, owner, TaskState.EXECUTING.value),
    ).fetchone()
    return row is not None


def expire_leases(conn: Connection) -> list[int]:
    """Executing tasks whose lease ran out go back to Pending (their executor died or
    hung); returns them, for re-announcing. A late result of the old attempt is then
    stale: ``record_result`` matches on the attempt. Whatever the old attempt wrote
    can never be committed, so its directory is recorded as an orphan at once."""
    rows = conn.execute(
        "SELECT t.task_id, t.attempt, p.table_id, t.spec->>'output_prefix' "
        "FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE t.state = %s AND t.lease_expires < now() ORDER BY t.task_id",
        (TaskState.EXECUTING.value,),
    ).fetchall()
    expired = []
    for task_id, attempt, table_id, output_prefix in rows:
        with conn.transaction():
            moved = move_task(
                conn,
                task_id,
                TaskState.EXECUTING,
                TaskState.PENDING,
                attempt=attempt,
                reason="lease expired",
                updates={"lease_owner": None, "lease_expires": None},
            )
            if moved is not None:
                _record_killed_attempt(conn, table_id, attempt_dir(output_prefix, attempt), attempt)
        if moved is not None:
            expired.append(int(task_id))
    return expired


def _record_killed_attempt(conn: Connection, table_id: int, directory: str, attempt: int) -> None:
    """Record a killed attempt's directory, if that needs no wait: the row's foreign key
    takes a share lock on the table row, and a lease sweep must never queue behind
    whoever holds that row exclusively (a table being dropped, an operator's lock).
    Skipped, the files are still found by the storage sweep (``firn.catalog.orphans``)."""
    free = conn.execute(
        "SELECT 1 FROM catalog_table WHERE table_id = %s FOR KEY SHARE SKIP LOCKED", (table_id,)
    ).fetchone()
    if free is not None:
        record_orphans(conn, table_id, [f"{directory}/"], f"attempt {attempt}: lease expired")


SERVES = {"minor": ("minor", "major", "full"), "major": ("major", "full"), "full": ("full",)}
"""The committed plan kinds that make a request of each kind unnecessary."""


def served_by_committed_plan(
    conn: Connection, table_id: int, partition_key: str, kind: str, max_seq: int
) -> int | None:
    """The committed plan that already folded in every change a request for ``kind``
    up to ``max_seq`` asked about (a replayed or late request), if there is one."""
    row = conn.execute(
        "SELECT max(plan_id) FROM compaction_plan WHERE table_id = %s AND partition_key = %s "
        "AND state = %s AND to_seq >= %s AND kind = ANY(%s)",
        (table_id, partition_key, PlanState.COMMITTED.value, max_seq, list(SERVES[kind])),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def pending_tasks_of(conn: Connection, plan_id: int, limit: int) -> list[int]:
    """Up to ``limit`` Pending tasks of one plan, in plan order (for batching)."""
    rows = conn.execute(
        "SELECT task_id FROM compaction_task WHERE plan_id = %s AND state = %s "
        "AND (not_before IS NULL OR not_before <= now()) ORDER BY ordinal LIMIT %s",
        (plan_id, TaskState.PENDING.value, limit),
    ).fetchall()
    return [int(r[0]) for r in rows]


def stale_waiting_tasks(conn: Connection, min_age_seconds: float) -> list[WaitingTask]:
    """Init and Pending tasks of open plans to announce (again): retries whose backoff
    just passed, and tasks untouched for ``min_age_seconds`` (their event was lost, or
    the planner died between storing the plan and announcing it); each is touched, so
    the next sweep does not announce it again at once."""
    rows = conn.execute(
        "UPDATE compaction_task t SET updated_at = now() FROM compaction_plan p "
        "WHERE p.plan_id = t.plan_id AND p.state = ANY(%s) AND t.state = ANY(%s) "
        "AND coalesce(t.not_before, '-infinity') <= now() "
        "AND (t.updated_at < now() - make_interval(secs => %s) "
        "     OR t.updated_at < t.not_before) "
        "RETURNING t.plan_id, t.task_id, t.state, t.attempt, t.input_bytes",
        (
            [s.value for s in OPEN_PLAN_STATES],
            [TaskState.INIT.value, TaskState.PENDING.value],
            min_age_seconds,
        ),
    ).fetchall()
    return [WaitingTask(int(p), int(t), TaskState(s), int(a), int(b)) for p, t, s, a, b in rows]
