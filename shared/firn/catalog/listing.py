"""Read-only views of compaction work for people and tools (``firn tasks``,
``firn compact --wait``): what tasks exist and what became of the plans made for a
request. Nothing here changes state; plans.py owns the moves."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from firn.model.states import PlanState, TaskState
from firn.postgres.connection import Connection

TERMINAL_PLAN_STATES = (PlanState.COMMITTED, PlanState.FAILED, PlanState.REPLACED)


@dataclass(frozen=True)
class TaskRow:
    """One compaction task with its plan, as ``firn tasks`` lists it."""

    table: str
    partition: str
    plan_id: int
    plan_kind: str
    plan_state: str
    task_id: int
    ordinal: int
    state: str
    attempt: int
    input_bytes: int
    lease_owner: str | None
    lease_expires: dt.datetime | None
    updated_at: dt.datetime
    error: str | None
    """The first line of the last failure, if any."""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "lease_expires": None if self.lease_expires is None else self.lease_expires.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def list_tasks(
    conn: Connection,
    *,
    table_id: int | None = None,
    state: TaskState | None = None,
    limit: int = 50,
) -> list[TaskRow]:
    """Tasks, most recently changed first, of one table or all; optionally in one state."""
    where = ["true"]
    params: list[Any] = []
    if table_id is not None:
        where.append("p.table_id = %s")
        params.append(table_id)
    if state is not None:
        where.append("t.state = %s")
        params.append(state.value)
    rows = conn.execute(
        "SELECT c.name, t.partition_key, p.plan_id, p.kind, p.state, t.task_id, t.ordinal, "
        "t.state, t.attempt, t.input_bytes, t.lease_owner, t.lease_expires, t.updated_at, "
        "t.error FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        f"JOIN catalog_table c ON c.table_id = p.table_id WHERE {' AND '.join(where)} "
        "ORDER BY t.updated_at DESC, t.task_id DESC LIMIT %s",
        [*params, limit],
    ).fetchall()
    return [_task_row(row) for row in rows]


def _task_row(row: tuple[Any, ...]) -> TaskRow:
    name, part, plan_id, kind, plan_state, task_id, ordinal, state, attempt = row[:9]
    input_bytes, owner, expires, updated, error = row[9:]
    return TaskRow(
        table=name,
        partition=part,
        plan_id=int(plan_id),
        plan_kind=kind,
        plan_state=plan_state,
        task_id=int(task_id),
        ordinal=int(ordinal),
        state=state,
        attempt=int(attempt),
        input_bytes=int(input_bytes),
        lease_owner=owner,
        lease_expires=expires,
        updated_at=updated,
        error=error.splitlines()[0] if error else None,
    )


@dataclass(frozen=True)
class PlanProgress:
    """Where one partition stands after a compaction request."""

    partition: str
    max_merged_seq: int
    plan_id: int | None = None
    """The newest plan made since the request (or open at the time), if any."""
    kind: str | None = None
    state: str | None = None
    to_seq: int | None = None
    error: str | None = None
    tasks: dict[str, int] = field(default_factory=dict)
    """Task counts by state."""
    committed: tuple[tuple[str, int], ...] = ()
    """(kind, to_seq) of every plan committed since the request."""


def settled_plan_ids(conn: Connection, table_id: int) -> dict[str, int]:
    """Per partition, the newest plan that had already ended: the baseline after
    which a request's plans are looked for."""
    rows = conn.execute(
        "SELECT partition_key, max(plan_id) FROM compaction_plan WHERE table_id = %s "
        "AND state = ANY(%s) GROUP BY partition_key",
        (table_id, [s.value for s in TERMINAL_PLAN_STATES]),
    ).fetchall()
    return {part: int(plan_id) for part, plan_id in rows}


def plan_progress(
    conn: Connection, table_id: int, partitions: Sequence[str], after: dict[str, int]
) -> dict[str, PlanProgress]:
    """For each partition, its max_merged_seq and the plans newer than ``after``."""
    plans = conn.execute(
        "SELECT p.partition_key, p.plan_id, p.kind, p.state, p.to_seq, p.error, "
        "coalesce(jsonb_object_agg(t.state, t.n) FILTER (WHERE t.state IS NOT NULL), '{}') "
        "FROM compaction_plan p LEFT JOIN LATERAL (SELECT state, count(*) AS n "
        "FROM compaction_task WHERE plan_id = p.plan_id GROUP BY state) t ON true "
        "WHERE p.table_id = %s AND p.partition_key = ANY(%s) "
        "GROUP BY p.partition_key, p.plan_id ORDER BY p.plan_id",
        (table_id, list(partitions)),
    ).fetchall()
    # Read after the plans: a plan's commit moves max_merged_seq in the same
    # transaction, so a plan seen Committed above is always reflected here (read the
    # other way round, a commit landing between the two reads looks half done).
    merged: dict[str, int] = dict(
        conn.execute(
            "SELECT partition_key, max_merged_seq FROM catalog_partition WHERE table_id = %s "
            "AND partition_key = ANY(%s)",
            (table_id, list(partitions)),
        ).fetchall()
    )
    progress = {part: PlanProgress(part, int(merged.get(part, 0))) for part in partitions}
    for part, plan_id, kind, state, to_seq, error, tasks in plans:
        if plan_id <= after.get(part, 0):
            continue
        before = progress[part]
        committed = before.committed
        if state == PlanState.COMMITTED:
            committed = (*committed, (str(kind), int(to_seq)))
        progress[part] = PlanProgress(
            partition=part,
            max_merged_seq=before.max_merged_seq,
            plan_id=plan_id,
            kind=kind,
            state=state,
            to_seq=to_seq,
            error=error.splitlines()[0] if error else None,
            tasks=tasks,
            committed=committed,
        )
    return progress
