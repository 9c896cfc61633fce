"""Planning one partition now: read its files at the current snapshot, draft the plan
(pure), persist it with the state check. The one path from a plan request to stored
tasks, shared by ``firn.compact`` and the planner service."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from firn.catalog.files import current_snapshot, merged_seqs_at, partition_files_at
from firn.catalog.plans import create_plan
from firn.catalog.schemas import definition_at, rewrite_budget, schema_id_at
from firn.engine.policies import Scope, plan
from firn.model.plans import PlanDraft, PlanRecord, PlanSkipped
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.model.tasks import Kind
from firn.postgres.connection import Connection


class PlannedTable(Protocol):
    """What planning needs to know of a table (a ``firn.Table`` has it)."""

    @property
    def table_id(self) -> int: ...
    @property
    def location(self) -> str: ...
    @property
    def definition(self) -> TableSchema: ...
    @property
    def properties(self) -> TableProperties: ...


def plan_now(
    conn: Connection,
    table: PlannedTable,
    partition: str,
    kind: Kind,
    *,
    reason: Mapping[str, Any] | None = None,
    score: float = 0.0,
    scope: Scope = "all",
    replace_waiting: bool = True,
) -> PlanRecord | PlanSkipped | None:
    """A stored plan for ``partition``, why none was stored, or ``None`` when there
    is nothing to compact. The policy is the registry's (``firn.engine.policies``) for
    ``kind`` and ``scope``: ``due`` plans as the services do (each unit folds or
    merges runs on its own numbers), ``all`` folds every change of the partition
    (major); a table without a key is bin-packed.
    ``replace_waiting`` False leaves an open plan of the same kind that waits to run
    as it is (``create_plan``)."""
    snapshot = current_snapshot(conn, table.table_id)
    definition = definition_at_snapshot(conn, table, snapshot)
    draft = _draft(conn, table, definition, partition, kind, snapshot, scope)
    if draft is None:
        return None
    return store_draft(
        conn,
        table,
        draft,
        snapshot,
        reason=reason,
        score=score,
        replace_waiting=replace_waiting,
        definition=definition,
    )


def store_draft(
    conn: Connection,
    table: PlannedTable,
    draft: PlanDraft,
    snapshot: int,
    *,
    reason: Mapping[str, Any] | None = None,
    score: float = 0.0,
    replace_waiting: bool = True,
    definition: TableSchema | None = None,
) -> PlanRecord | PlanSkipped:
    """``draft``, made at ``snapshot``, stored as a plan with the table's task
    settings (``create_plan``: skipped when the partition moved on meanwhile)."""
    if definition is None:
        definition = definition_at_snapshot(conn, table, snapshot)
    return create_plan(
        conn,
        table.table_id,
        table.location,
        draft,
        planned_snapshot=snapshot,
        target_file_size=table.properties.target_file_size,
        vector_ratio=table.properties.deletion_vector_ratio,
        small_file_bytes=table.properties.vector_min_file_bytes,
        vertical_group=table.properties.vertical_group(definition),
        compression=table.properties.file_compression,
        reason=reason,
        score=score,
        definition=definition,
        replace_waiting=replace_waiting,
    )


def definition_at_snapshot(conn: Connection, table: PlannedTable, snapshot: int) -> TableSchema:
    """The table's definition at ``snapshot`` (its schema version), which every file
    of the snapshot was written under or before: a plan's tasks write with it. The
    caller's own definition when it is that version (it knows every earlier one)."""
    if schema_id_at(conn, table.table_id, snapshot) == table.definition.schema_id:
        return table.definition
    return definition_at(conn, table.table_id, snapshot)


def draft_now(
    conn: Connection, table: PlannedTable, partition: str, kind: Kind, *, scope: Scope = "all"
) -> PlanDraft | None:
    """What ``plan_now`` would plan for ``partition`` now, without storing anything:
    ``None`` when there is nothing to compact."""
    snapshot = current_snapshot(conn, table.table_id)
    definition = definition_at_snapshot(conn, table, snapshot)
    return _draft(conn, table, definition, partition, kind, snapshot, scope)


def _draft(
    conn: Connection,
    table: PlannedTable,
    definition: TableSchema,
    partition: str,
    kind: Kind,
    snapshot: int,
    scope: Scope,
) -> PlanDraft | None:
    files = partition_files_at(conn, table.table_id, snapshot, partition)
    merged = merged_seqs_at(conn, table.table_id, snapshot).get(partition, 0)
    budget = 0
    if (
        scope == "due"
        and kind == Kind.MAJOR
        and definition.keyed
        and any(f.store == "base" and f.schema_id < definition.schema_id for f in files)
    ):
        ratio = table.properties.schema_rewrite_ratio
        budget = rewrite_budget(conn, table.table_id, partition, definition.schema_id, ratio)
    return plan(
        definition,
        table.properties,
        partition,
        merged,
        files,
        kind,
        scope=scope,
        schema_budget=budget,
    )
