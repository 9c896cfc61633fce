"""Read-only history of a table for people (the web dashboard): its recent
compaction plans and tasks with every state they went through, what each snapshot
added, from which write amplification and the backlog are drawn over time, and its
schema versions with their columns (``describe_columns`` is also how ``firn schema``
shows them). Nothing here changes state."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa

from firn.model.projection import default_scalar
from firn.model.schema import DOC, default_json, field_id
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


@dataclass(frozen=True)
class SchemaColumn:
    """One column of a schema version, as people read it."""

    field_id: int | None
    name: str
    type: str
    """The Arrow type as pyarrow spells it (``decimal128(12, 2)``)."""
    required: bool
    default: Any
    """The default rows written before the column read as, JSON-ready and readable:
    numbers and booleans as such, dates and times in ISO form, decimals as text,
    binary as hex; None when it has none (such rows read as null)."""
    default_text: str | None
    """The same as one string (a text default quoted), None when there is none."""
    doc: str | None
    key: bool
    partition: bool


@dataclass(frozen=True)
class SchemaHistory:
    """One schema version (``table_schema``): when it began and what it changed."""

    schema_id: int
    snapshot_id: int
    """The snapshot it began at (0: as the table was created)."""
    created_at: dt.datetime | None
    changes: tuple[str, ...]
    columns: tuple[SchemaColumn, ...]


def describe_columns(
    schema: pa.Schema, primary_key: Sequence[str], partition_by: Sequence[str]
) -> tuple[SchemaColumn, ...]:
    """A version's columns, in order, for people (``firn schema``, the dashboard)."""
    out = []
    for f in schema:
        default = _readable_default(f)
        doc = (f.metadata or {}).get(DOC)
        out.append(
            SchemaColumn(
                field_id=field_id(f),
                name=f.name,
                type=str(f.type),
                required=not f.nullable,
                default=default,
                default_text=_default_text(default, f.type),
                doc=None if doc is None else doc.decode(errors="replace"),
                key=f.name in primary_key,
                partition=f.name in partition_by,
            )
        )
    return tuple(out)


def _readable_default(field: pa.Field) -> Any:
    value = default_json(field)
    if value is None:
        return None
    scalar = default_scalar(value, field.type)
    try:
        plain = scalar.as_py()
    except (ValueError, OverflowError, pa.ArrowException):
        return str(scalar)  # e.g. nanoseconds a datetime cannot hold
    if isinstance(plain, dt.date):  # datetimes too
        return plain.isoformat()
    if isinstance(plain, Decimal):
        return str(plain)
    if isinstance(plain, bytes):
        return plain.hex()
    return plain


def _default_text(value: Any, type_: pa.DataType) -> str | None:
    if value is None:
        return None
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def schema_history(conn: Connection, table_id: int) -> list[SchemaHistory]:
    """Every schema version of the table, oldest first, with its columns (one query)."""
    rows = conn.execute(
        "SELECT v.schema_id, v.snapshot_id, v.created_at, v.changes, v.schema_ipc, "
        "v.primary_key, c.partition_by FROM table_schema v JOIN catalog_table c "
        "USING (table_id) WHERE v.table_id = %s ORDER BY v.schema_id",
        (table_id,),
    ).fetchall()
    return [
        SchemaHistory(
            schema_id=int(sid),
            snapshot_id=int(snapshot_id),
            created_at=created_at,
            changes=tuple(changes or ()),
            columns=describe_columns(
                pa.ipc.read_schema(pa.py_buffer(bytes(ipc))), tuple(key), tuple(parts or ())
            ),
        )
        for sid, snapshot_id, created_at, changes, ipc, key, parts in rows
    ]
