"""Plans in Postgres: storing a new plan with its tasks after the state check
(replacing the partition's open plan, or skipping the partition), failing a plan, and
asking whether a committed plan already served a request (design §5, design §9).

The task's way through a plan lives next door: ``firn.catalog.claiming`` (release and
claim), ``firn.catalog.leasing`` (leases), ``firn.catalog.results`` (results and
retries); every move is made by ``firn.catalog.transitions``, whose docstring gives
the lock order these transactions keep (partition, then plan, then tasks).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from firn.catalog.orphans import record_orphans
from firn.catalog.transitions import move_plan, move_task
from firn.model.files import DEFAULT_CODEC
from firn.model.plans import PlanDraft, PlanRecord, PlanSkipped
from firn.model.schema import TableSchema
from firn.model.states import PLAN, TASK, Actor, PlanState, TaskState
from firn.model.tasks import OutputFile
from firn.postgres.connection import Connection

OPEN_PLAN_STATES = (PlanState.PLANNED, PlanState.EXECUTING, PlanState.COMMITTING)
BUSY_TASK_STATES = (TaskState.EXECUTING, TaskState.PREPARED)


def create_plan(
    conn: Connection,
    table_id: int,
    location: str,
    draft: PlanDraft,
    *,
    planned_snapshot: int,
    target_file_size: int,
    vector_ratio: float = 0.0,
    small_file_bytes: int = 0,
    vertical_group: int = 0,
    compression: str = DEFAULT_CODEC,
    reason: Mapping[str, Any] | None = None,
    score: float = 0.0,
    definition: TableSchema | None = None,
    replace_waiting: bool = True,
) -> PlanRecord | PlanSkipped:
    """Persist a plan and its tasks (Init) in one transaction, after the state check:
    skip a partition that is busy or whose open plan already covers the draft's S,
    replace any other open plan; with ``replace_waiting`` False, skip one still waiting
    to run that is of the draft's kind too (its changes are planned once it commits)."""
    with conn.transaction():
        # Four round trips in the common case (no open plan): the lock, the checks, the
        # plan with its history row and task ids, the tasks with theirs.
        part = conn.execute(
            "SELECT max_merged_seq FROM catalog_partition WHERE table_id = %s "
            "AND partition_key = %s FOR UPDATE",
            (table_id, draft.partition_key),
        ).fetchone()
        if part is None or int(part[0]) != draft.from_merged_seq:
            return PlanSkipped(draft.partition_key, "stale: the partition was compacted since")
        # A merge of runs leaves the merged seq where it was but removes the files it
        # read, which the draft may name: a plan drafted before it committed would
        # fail its own commit. The row lock above orders this check after any such
        # commit (a plan commit locks the same row); it is a statement of its own, so
        # its snapshot is taken after the lock was granted.
        compacted, open_plan_id = _checks(conn, table_id, draft.partition_key, planned_snapshot)
        if compacted:
            return PlanSkipped(draft.partition_key, "stale: the partition was compacted since")
        replaced = None
        if open_plan_id is not None:
            replaced = _replace_open_plan(conn, table_id, draft, replace_waiting)
            if isinstance(replaced, PlanSkipped):
                return replaced
        # The tasks' ids come with the plan's (a spec names its own task).
        row = conn.execute(
            "WITH plan AS (INSERT INTO compaction_plan (table_id, partition_key, kind, state, "
            "from_merged_seq, to_seq, planned_snapshot, reason, score, waiting_since) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, coalesce(%s, now())) "
            "RETURNING plan_id), "
            "history AS (INSERT INTO state_transition (machine, entity_id, from_state, "
            "to_state, attempt, reason) SELECT 'plan', plan_id, '', %s, 0, 'planned' FROM plan) "
            "SELECT plan_id, ARRAY(SELECT nextval(pg_get_serial_sequence('compaction_task', "
            "'task_id')) FROM generate_series(1, %s)) FROM plan",
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
                replaced,
                PLAN.initial.value,
                len(draft.tasks),
            ),
        ).fetchone()
        assert row is not None
        plan_id, task_ids = int(row[0]), sorted(int(t) for t in row[1])
        specs = [
            draft.task_spec(
                task,
                plan_id=plan_id,
                task_id=task_id,
                table_id=table_id,
                location=location,
                target_file_size=target_file_size,
                vector_ratio=vector_ratio,
                small_file_bytes=small_file_bytes,
                vertical_group=vertical_group,
                compression=compression,
                definition=definition,
            )
            for task, task_id in zip(draft.tasks, task_ids, strict=True)
        ]
        conn.execute(
            "WITH born AS (INSERT INTO compaction_task (task_id, plan_id, partition_key, "
            "ordinal, state, spec, input_bytes) SELECT t.task_id, %s, %s, t.ordinal - 1, %s, "
            "t.spec, t.input_bytes FROM unnest(%s::bigint[], %s::jsonb[], %s::bigint[]) "
            "WITH ORDINALITY AS t(task_id, spec, input_bytes, ordinal) RETURNING task_id) "
            "INSERT INTO state_transition (machine, entity_id, from_state, to_state, attempt, "
            "reason) SELECT 'task', task_id, '', %s, 0, 'planned' FROM born",
            (
                plan_id,
                draft.partition_key,
                TASK.initial.value,
                [spec.task_id for spec in specs],
                [spec.to_json() for spec in specs],
                [task.input_bytes for task in draft.tasks],
                TASK.initial.value,
            ),
        )
    return PlanRecord(plan_id, tuple(specs))


def _checks(
    conn: Connection, table_id: int, partition: str, snapshot: int
) -> tuple[bool, int | None]:
    """Whether a plan of ``partition`` committed after ``snapshot``, and its open plan
    (locked), if it has one: one statement."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM compaction_plan WHERE table_id = %(t)s "
        "AND partition_key = %(k)s AND state = %(committed)s "
        "AND committed_snapshot > %(snapshot)s), "
        "(SELECT plan_id FROM compaction_plan WHERE table_id = %(t)s "
        "AND partition_key = %(k)s AND state = ANY(%(open)s) FOR UPDATE)",
        {
            "t": table_id,
            "k": partition,
            "committed": PlanState.COMMITTED.value,
            "snapshot": snapshot,
            "open": [s.value for s in OPEN_PLAN_STATES],
        },
    ).fetchone()
    assert row is not None
    return bool(row[0]), None if row[1] is None else int(row[1])


@dataclass(frozen=True)
class OpenPlan:
    """A partition's open plan, as a request is checked against it."""

    plan_id: int
    kind: str
    to_seq: int


def open_plans(conn: Connection, table_id: int) -> dict[str, OpenPlan]:
    """The open plan of each partition of the table that has one (at most one a
    partition: the ``compaction_plan_open`` index)."""
    rows = conn.execute(
        "SELECT partition_key, plan_id, kind, to_seq FROM compaction_plan "
        "WHERE table_id = %s AND state = ANY(%s)",
        (table_id, [s.value for s in OPEN_PLAN_STATES]),
    ).fetchall()
    return {row[0]: OpenPlan(int(row[1]), row[2], int(row[3])) for row in rows}


def open_plan(conn: Connection, table_id: int, partition: str) -> OpenPlan | None:
    """The partition's open plan, if it has one."""
    row = conn.execute(
        "SELECT plan_id, kind, to_seq FROM compaction_plan WHERE table_id = %s "
        "AND partition_key = %s AND state = ANY(%s)",
        (table_id, partition, [s.value for s in OPEN_PLAN_STATES]),
    ).fetchone()
    return None if row is None else OpenPlan(int(row[0]), row[1], int(row[2]))


def _replace_open_plan(
    conn: Connection, table_id: int, draft: PlanDraft, replace_waiting: bool
) -> PlanSkipped | dt.datetime | None:
    """Replace the partition's open plan, unless it is running or already covers
    the draft (``PlanSkipped``); returns when the replaced plan began waiting, for
    the new one to keep its place in the queue (None: there was none)."""
    row = conn.execute(
        "SELECT plan_id, state, to_seq, kind, waiting_since FROM compaction_plan "
        "WHERE table_id = %s AND partition_key = %s AND state = ANY(%s) FOR UPDATE",
        (table_id, draft.partition_key, [s.value for s in OPEN_PLAN_STATES]),
    ).fetchone()
    if row is None:
        return None
    plan_id, state, to_seq, kind, waiting_since = row
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
    if not replace_waiting and kind == draft.kind:
        return PlanSkipped(
            draft.partition_key,
            f"queued: plan {plan_id} waits to run, newer changes follow it",
            queued=True,
        )
    for task_id, task_state in conn.execute(
        "SELECT task_id, state FROM compaction_task WHERE plan_id = %s ORDER BY ordinal",
        (plan_id,),
    ).fetchall():
        move_task(
            conn,
            task_id,
            TaskState(task_state),
            TaskState.REPLACED,
            by=Actor.PLANNER,
            reason="replanned",
        )
    move_plan(
        conn, plan_id, PlanState(state), PlanState.REPLACED, by=Actor.PLANNER, reason="replanned"
    )
    return waiting_since  # type: ignore[no-any-return]


def fail_plan(conn: Connection, plan_id: int, reason: str, *, by: Actor) -> bool:
    """Fail a plan that cannot commit: its waiting tasks are replaced, its prepared
    outputs become orphans, and the partition is free to be planned again."""
    with conn.transaction():
        row = conn.execute(
            "SELECT table_id, state FROM compaction_plan WHERE plan_id = %s FOR UPDATE",
            (plan_id,),
        ).fetchone()
        if row is None or not PLAN.try_accept(PlanState(row[1]), PlanState.FAILED, by=by):
            return False
        table_id, state = int(row[0]), PlanState(row[1])
        tasks = conn.execute(
            "SELECT task_id, state, outputs FROM compaction_task WHERE plan_id = %s",
            (plan_id,),
        ).fetchall()
        why = f"plan failed: {reason}"
        for task_id, task_state, outputs in tasks:
            old = TaskState(task_state)
            if old == TaskState.PREPARED:
                move_task(conn, task_id, old, TaskState.FAILED, by=by, reason=why)
                paths = [p for o in outputs or [] for p in OutputFile.from_dict(o).written_paths()]
                record_orphans(conn, table_id, paths, f"plan {plan_id} failed")
            elif TASK.try_accept(old, TaskState.REPLACED, by=by):
                move_task(conn, task_id, old, TaskState.REPLACED, by=by, reason=why)
        move_plan(conn, plan_id, state, PlanState.FAILED, by=by, reason=reason, error=reason)
    return True


@dataclass(frozen=True)
class PlanPlace:
    """Where a plan belongs: its table (by name and id), partition and kind."""

    table: str
    table_id: int
    partition_key: str
    kind: str


def plan_place(conn: Connection, plan_id: int) -> PlanPlace | None:
    """The table, partition and kind of ``plan_id``; None when there is no such plan."""
    row = conn.execute(
        "SELECT t.name, t.table_id, p.partition_key, p.kind FROM compaction_plan p "
        "JOIN catalog_table t USING (table_id) WHERE p.plan_id = %s",
        (plan_id,),
    ).fetchone()
    return None if row is None else PlanPlace(row[0], int(row[1]), row[2], row[3])


def plan_failure(conn: Connection, plan_id: int) -> str | None:
    """Why ``plan_id`` failed (the first line of its error, naming the task and the
    file), or None when it has not failed."""
    row = conn.execute(
        "SELECT state, error FROM compaction_plan WHERE plan_id = %s", (plan_id,)
    ).fetchone()
    if row is None or row[0] != PlanState.FAILED:
        return None
    lines = (row[1] or "").strip().splitlines()
    return lines[0] if lines else ""


SERVES = {"minor": ("minor", "major", "full"), "major": ("major", "full"), "full": ("full",)}
"""The committed plan kinds that make a request of each kind unnecessary."""


@dataclass(frozen=True)
class RequestView:
    """What a plan request for one partition is checked against, read in one round
    trip: most requests in a fleet are answered by it alone (their partition was
    planned already, gathered with another's)."""

    table: str
    """The table's name, for the event's to be compared with."""
    greatest_seq: int
    """The greatest change seq committed to the partition."""
    served_by: int | None
    """The committed plan that already did what the request asks (a replayed or late
    request), if any. A major request is served only once ``max_merged_seq`` reaches
    its seq: a tiered plan may have folded some units of the partition and not others."""
    open_plan: OpenPlan | None


def request_view(
    conn: Connection, table_id: int, partition_key: str, kind: str, max_seq: int
) -> RequestView | None:
    """The partition as a request for ``kind`` up to ``max_seq`` sees it; None when
    the table has no such partition."""
    row = conn.execute(
        "SELECT c.name, p.max_seq, "
        "(SELECT max(s.plan_id) FROM compaction_plan s WHERE s.table_id = p.table_id "
        "AND s.partition_key = p.partition_key AND s.state = %(committed)s "
        "AND s.to_seq >= %(seq)s AND s.kind = ANY(%(serves)s) "
        "AND (%(kind)s = 'minor' OR p.max_merged_seq >= %(seq)s)), "
        "o.plan_id, o.kind, o.to_seq "
        "FROM catalog_table c JOIN catalog_partition p USING (table_id) "
        "LEFT JOIN compaction_plan o ON o.table_id = p.table_id "
        "AND o.partition_key = p.partition_key AND o.state = ANY(%(open)s) "
        "WHERE c.table_id = %(t)s AND p.partition_key = %(k)s",
        {
            "t": table_id,
            "k": partition_key,
            "committed": PlanState.COMMITTED.value,
            "seq": max_seq,
            "serves": list(SERVES[kind]),
            "kind": kind,
            "open": [s.value for s in OPEN_PLAN_STATES],
        },
    ).fetchone()
    if row is None:
        return None
    name, greatest, served, plan_id, plan_kind, to_seq = row
    return RequestView(
        table=name,
        greatest_seq=int(greatest),
        served_by=None if served is None else int(served),
        open_plan=None if plan_id is None else OpenPlan(int(plan_id), plan_kind, int(to_seq)),
    )
