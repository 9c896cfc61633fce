"""Planning one partition now: read its files at the current snapshot, draft the plan
(pure), persist it with the state check. The one path from a plan request to stored
tasks, shared by ``firn.compact`` and the planner service."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from firn.catalog.files import partition_files_at
from firn.catalog.plans import create_plan
from firn.catalog.schemas import definition_at, rewrite_budget, schema_id_at
from firn.engine.policies import Scope, plan
from firn.errors import ConfigError
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
    view: PlanningView | None = None,
) -> PlanRecord | PlanSkipped | None:
    """A stored plan for ``partition``, why none was stored, or ``None`` when there
    is nothing to compact. The policy is the registry's (``firn.engine.policies``) for
    ``kind`` and ``scope``: ``due`` plans as the services do (each unit folds or
    merges runs on its own numbers), ``all`` folds every change of the partition
    (major); a table without a key is bin-packed.
    ``replace_waiting`` False leaves an open plan of the same kind that waits to run
    as it is (``create_plan``). ``view``: the table as read for planning (``view_now``;
    read here when not given), shared by the partitions of one gathering."""
    view = view if view is not None else view_now(conn, table)
    draft = _draft(conn, table, view, partition, kind, scope)
    if draft is None:
        return None
    return store_draft(
        conn,
        table,
        draft,
        view.snapshot,
        reason=reason,
        score=score,
        replace_waiting=replace_waiting,
        definition=view.definition,
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


@dataclass(frozen=True)
class PlanningView:
    """The table as a plan is drafted against: its newest snapshot, the definition of
    that snapshot's schema version, each partition's merged seq there."""

    snapshot: int
    definition: TableSchema
    merged_seqs: Mapping[str, int]


def view_now(conn: Connection, table: PlannedTable) -> PlanningView:
    """The table's newest snapshot, its schema version's definition (the caller's own
    when it is that version: it knows every earlier one) and its partitions' merged
    seqs, in one statement (one snapshot of the catalog for all three)."""
    row = conn.execute(
        "SELECT t.last_snapshot, (SELECT max(v.schema_id) FROM table_schema v "
        "WHERE v.table_id = t.table_id AND v.snapshot_id <= t.last_snapshot), "
        "(SELECT coalesce(jsonb_object_agg(m.partition_key, m.max_merged_seq), '{}') FROM "
        "(SELECT DISTINCT ON (h.partition_key) h.partition_key, h.max_merged_seq "
        "FROM partition_merge_history h WHERE h.table_id = t.table_id "
        "AND h.snapshot_id <= t.last_snapshot ORDER BY h.partition_key, h.snapshot_id DESC) m) "
        "FROM catalog_table t WHERE t.table_id = %s",
        (table.table_id,),
    ).fetchone()
    if row is None:
        raise ConfigError(f"table {table.table_id} no longer exists")
    snapshot, schema_id, merged = int(row[0]), row[1], row[2]
    if schema_id is None:
        raise ConfigError(f"table {table.table_id} has no schema at snapshot {snapshot}")
    definition = (
        table.definition
        if int(schema_id) == table.definition.schema_id
        else definition_at(conn, table.table_id, snapshot)
    )
    return PlanningView(snapshot, definition, {k: int(v) for k, v in merged.items()})


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
    return _draft(conn, table, view_now(conn, table), partition, kind, scope)


def _draft(
    conn: Connection,
    table: PlannedTable,
    view: PlanningView,
    partition: str,
    kind: Kind,
    scope: Scope,
) -> PlanDraft | None:
    definition, snapshot = view.definition, view.snapshot
    files = partition_files_at(conn, table.table_id, snapshot, partition)
    merged = view.merged_seqs.get(partition, 0)
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
