"""``Table.status``: per partition, its merge state, what waits to be compacted, the
trigger decision and score, the open plan with its task states, the last compaction
(design §10), and how fresh its Iceberg publication is (``firn.catalog.publication``).
Read-only; a handful of queries whatever the table's size."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from firn.catalog.claiming import PRIORITY, TABLE_STANDING, queue_parameters, waiting_tables
from firn.catalog.metrics import partition_metrics
from firn.catalog.plans import OPEN_PLAN_STATES
from firn.catalog.publication import publication_status
from firn.errors import ConfigError
from firn.model.properties import TableProperties
from firn.model.states import TaskState
from firn.model.triggers import decide, score
from firn.postgres.connection import Connection


def table_status(
    conn: Connection, table_id: int, name: str, properties: TableProperties
) -> dict[str, Any]:
    head = conn.execute(
        "SELECT last_seq, last_snapshot FROM catalog_table WHERE table_id = %s", (table_id,)
    ).fetchone()
    if head is None:
        raise ConfigError(f"table {name!r} no longer exists")
    merge_state = {
        part: (int(mms), int(max_seq))
        for part, mms, max_seq in conn.execute(
            "SELECT partition_key, max_merged_seq, max_seq FROM catalog_partition "
            "WHERE table_id = %s",
            (table_id,),
        ).fetchall()
    }
    metrics = partition_metrics(conn, table_id, properties)
    open_plans = _open_plans(conn, table_id)
    last = _last_compactions(conn, table_id)
    partitions = []
    for part, m in metrics.items():
        decision = decide(m, properties)
        mms, max_seq = merge_state[part]
        partitions.append(
            {
                "partition": part,
                "max_merged_seq": mms,
                "max_seq": max_seq,
                "unmerged_files": m.unmerged_files,
                "unmerged_bytes": m.unmerged_bytes,
                "unmerged_insert_bytes": m.unmerged_insert_bytes,
                "unmerged_delete_bytes": m.unmerged_delete_bytes,
                "base_files": m.base_files,
                "base_bytes": m.base_bytes,
                "small_files": m.small_files,
                "max_runs_per_node": m.max_runs_per_node,
                "score": score(m, properties),
                "due": None if decision.kind is None else decision.kind.value,
                "reasons": list(decision.reasons),
                "open_plan": open_plans.get(part),
                "last_compaction": last.get(part),
            }
        )
    published = publication_status(conn, table_id)
    return {
        "table": name,
        "seq": head[0],
        "snapshot": head[1],
        "partitions": partitions,
        "publication": None if published is None else published.as_dict(),
    }


def _open_plans(conn: Connection, table_id: int) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT p.partition_key, p.plan_id, p.kind, p.state, p.to_seq, t.state, count(t.*) "
        "FROM compaction_plan p LEFT JOIN compaction_task t USING (plan_id) "
        "WHERE p.table_id = %s AND p.state = ANY(%s) "
        "GROUP BY p.partition_key, p.plan_id, p.kind, p.state, p.to_seq, t.state",
        (table_id, [s.value for s in OPEN_PLAN_STATES]),
    ).fetchall()
    plans: dict[str, dict[str, Any]] = {}
    tasks: dict[str, dict[str, int]] = defaultdict(dict)
    for part, plan_id, kind, state, to_seq, task_state, n in rows:
        plans[part] = {"plan_id": plan_id, "kind": kind, "state": state, "to_seq": to_seq}
        if task_state is not None:
            tasks[part][task_state] = int(n)
    places = _queue_places(conn)
    for part, plan in plans.items():
        plan["tasks"] = tasks[part]
        plan["queue"] = places.get(plan["plan_id"])
    return plans


def _queue_places(conn: Connection) -> dict[int, int]:
    """Each open plan with Pending tasks and its place (1 = next) in the order the
    dispatchers claim in: tables within their quota first, then the highest plan
    priority (its score, aged), then the oldest plan, over every table
    (``firn.catalog.claiming.claimable_tasks``)."""
    waiting = waiting_tables(conn)
    if not waiting:
        return {}
    rows = conn.execute(
        TABLE_STANDING + "SELECT p.plan_id, "
        f"row_number() OVER (ORDER BY s.over_quota, {PRIORITY} DESC, p.plan_id) "
        "FROM compaction_plan p JOIN standing s USING (table_id) "
        "WHERE p.state = ANY(%(open)s) AND EXISTS ("
        "SELECT 1 FROM compaction_task t WHERE t.plan_id = p.plan_id AND t.state = %(pending)s)",
        {
            **queue_parameters(),
            "open": [s.value for s in OPEN_PLAN_STATES],
            "pending": TaskState.PENDING.value,
            "tables": waiting,
        },
    ).fetchall()
    return {int(plan_id): int(place) for plan_id, place in rows}


def _last_compactions(conn: Connection, table_id: int) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT DISTINCT ON (partition_key) partition_key, plan_id, kind, committed_snapshot, "
        "updated_at FROM compaction_plan WHERE table_id = %s AND state = 'Committed' "
        "ORDER BY partition_key, plan_id DESC",
        (table_id,),
    ).fetchall()
    return {
        part: {"plan_id": plan_id, "kind": kind, "snapshot": snapshot, "at": at.isoformat()}
        for part, plan_id, kind, snapshot, at in rows
    }
