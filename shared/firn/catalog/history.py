"""Read-only history of a table for people (the web dashboard): its recent
compaction plans and tasks with every state they went through, and what each
snapshot added, from which write amplification and the backlog are drawn over time.
Nothing here changes state."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from firn.postgres.connection import Connection


@dataclass(frozen=True)
class Transition:
    """One recorded state change of a plan or task (``state_transition``)."""

    from_state: str
    to_state: str
    attempt: int
    reason: str
    at: dt.datetime


@dataclass(frozen=True)
class TaskHistory:
    task_id: int
    ordinal: int
    state: str
    attempt: int
    input_bytes: int
    transitions: tuple[Transition, ...] = ()


@dataclass(frozen=True)
class PlanHistory:
    """One compaction plan, its tasks, and the states both went through."""

    plan_id: int
    partition: str
    kind: str
    state: str
    score: float
    to_seq: int
    created_at: dt.datetime
    updated_at: dt.datetime
    error: str | None
    transitions: tuple[Transition, ...] = ()
    tasks: tuple[TaskHistory, ...] = field(default_factory=tuple)


def recent_plans(conn: Connection, table_id: int, limit: int = 20) -> list[PlanHistory]:
    """The table's ``limit`` newest plans, newest first, with their tasks and the
    transitions of both (a handful of queries whatever the limit)."""
    plans = conn.execute(
        "SELECT plan_id, partition_key, kind, state, score, to_seq, created_at, updated_at, "
        "error FROM compaction_plan WHERE table_id = %s ORDER BY plan_id DESC LIMIT %s",
        (table_id, limit),
    ).fetchall()
    plan_ids = [int(row[0]) for row in plans]
    tasks = conn.execute(
        "SELECT plan_id, task_id, ordinal, state, attempt, input_bytes FROM compaction_task "
        "WHERE plan_id = ANY(%s) ORDER BY plan_id, ordinal",
        (plan_ids,),
    ).fetchall()
    task_ids = [int(row[1]) for row in tasks]
    moves = _transitions(conn, "plan", plan_ids)
    task_moves = _transitions(conn, "task", task_ids)
    by_plan: dict[int, list[TaskHistory]] = defaultdict(list)
    for plan_id, task_id, ordinal, state, attempt, input_bytes in tasks:
        by_plan[int(plan_id)].append(
            TaskHistory(
                int(task_id),
                int(ordinal),
                state,
                int(attempt),
                int(input_bytes),
                tuple(task_moves[int(task_id)]),
            )
        )
    return [
        PlanHistory(
            plan_id=int(plan_id),
            partition=part,
            kind=kind,
            state=state,
            score=float(score),
            to_seq=int(to_seq),
            created_at=created,
            updated_at=updated,
            error=error.splitlines()[0] if error else None,
            transitions=tuple(moves[int(plan_id)]),
            tasks=tuple(by_plan[int(plan_id)]),
        )
        for plan_id, part, kind, state, score, to_seq, created, updated, error in plans
    ]


def _transitions(conn: Connection, machine: str, ids: list[int]) -> dict[int, list[Transition]]:
    rows = conn.execute(
        "SELECT entity_id, from_state, to_state, attempt, reason, at FROM state_transition "
        "WHERE machine = %s AND entity_id = ANY(%s) ORDER BY entity_id, transition_id",
        (machine, ids),
    ).fetchall()
    found: dict[int, list[Transition]] = defaultdict(list)
    for entity, old, new, attempt, reason, at in rows:
        found[int(entity)].append(Transition(old, new, int(attempt), reason, at))
    return found


@dataclass(frozen=True)
class SnapshotBytes:
    """What one snapshot added, and everything written up to it."""

    snapshot_id: int
    kind: str
    """``commit`` (a producer) or ``compaction``."""
    at: dt.datetime
    committed_total: int
    """Bytes of every producer commit up to this snapshot."""
    compacted_total: int
    """Bytes every compaction wrote up to this snapshot."""

    @property
    def amplification(self) -> float | None:
        """Everything written per byte committed, up to this snapshot."""
        if self.committed_total == 0:
            return None
        return (self.committed_total + self.compacted_total) / self.committed_total


def snapshot_bytes(conn: Connection, table_id: int, limit: int = 500) -> list[SnapshotBytes]:
    """The ``limit`` newest snapshots, oldest first, with the bytes written up to each
    (files already expired by retention are no longer counted, as in
    ``firn.catalog.progress.written_bytes``)."""
    rows = conn.execute(
        "SELECT * FROM (SELECT s.snapshot_id, s.kind, s.created_at, "
        "sum(coalesce(a.bytes, 0)) FILTER (WHERE s.kind = 'commit') "
        "OVER (ORDER BY s.snapshot_id), "
        "sum(coalesce(a.bytes, 0)) FILTER (WHERE s.kind = 'compaction') "
        "OVER (ORDER BY s.snapshot_id) "
        "FROM snapshot s LEFT JOIN (SELECT added_snapshot, sum(size_bytes) AS bytes "
        "FROM data_file WHERE table_id = %(table)s GROUP BY added_snapshot) a "
        "ON a.added_snapshot = s.snapshot_id WHERE s.table_id = %(table)s "
        "ORDER BY s.snapshot_id DESC LIMIT %(limit)s) newest ORDER BY snapshot_id",
        {"table": table_id, "limit": limit},
    ).fetchall()
    return [
        SnapshotBytes(int(snap), kind, at, int(committed or 0), int(compacted or 0))
        for snap, kind, at, committed, compacted in rows
    ]
