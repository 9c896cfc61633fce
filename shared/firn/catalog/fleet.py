"""The fleet at a glance (``firn status --fleet``, the dashboard): how many tables and
partitions wait for compaction, the partition that has waited longest, and which
tables owe the most.

Its cost follows the backlog, not the catalog: the partitions with unmerged changes
come from a partial index (migration 0015), and only theirs are measured against
the triggers, a few hundred tables a statement (``partition_states_of``). A
partition whose changes are all folded is not due by its changes; the base-layout
triggers (small or misplaced base files) show in ``firn status TABLE``.

*Waiting* is the age of a partition's oldest change file not yet folded into its
base (the commit that wrote it, by the database's clock): how stale the compacted
view of that partition is. A minor compaction rewrites change files under their
newest seq, so after one the age counts from that seq's commit.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from firn.catalog.metrics import TableRead, partition_states_of
from firn.catalog.plans import OPEN_PLAN_STATES
from firn.model.properties import TableProperties
from firn.model.triggers import decide
from firn.postgres.connection import Connection

# Partitions with unmerged changes (the partial index) and the commit time of each
# one's oldest unfolded change file (an index lookup each, the snapshot's too: a join
# with the snapshot table read every commit snapshot retention keeps). A test
# EXPLAINs it. The tables' names and properties are read once a table (TABLES).
BACKLOG = """
SELECT p.table_id, p.partition_key,
       extract(epoch FROM now() - (
           SELECT min(s.created_at) FROM snapshot s
           WHERE s.table_id = p.table_id AND s.kind = 'commit' AND s.seq = oldest.seq))
FROM catalog_partition p
LEFT JOIN LATERAL (
    SELECT f.seq FROM data_file f
    WHERE f.table_id = p.table_id AND f.partition_key = p.partition_key
      AND f.store = 'change' AND f.seq > p.max_merged_seq AND f.removed_snapshot IS NULL
    ORDER BY f.seq LIMIT 1
) oldest ON true
WHERE p.max_seq > p.max_merged_seq
"""

TABLES = "SELECT table_id, name, properties::text FROM catalog_table WHERE table_id = ANY(%s)"


@dataclass(frozen=True)
class TableDebt:
    """What one table owes compaction."""

    table: str
    partitions_unmerged: int
    partitions_due: int
    unmerged_files: int
    unmerged_bytes: int
    oldest_change_seconds: float | None
    open_plans: int


@dataclass(frozen=True)
class WaitingPartition:
    table: str
    partition: str
    due: str
    """The compaction due (major, minor, full)."""
    waiting_seconds: float | None


@dataclass(frozen=True)
class FleetStatus:
    tables: int
    partitions: int
    partitions_unmerged: int
    partitions_due: int
    tables_due: int
    open_plans: int
    tasks: dict[str, int]
    """The open plans' tasks by state."""
    oldest_due: WaitingPartition | None
    debts: list[TableDebt]
    """Tables with unmerged changes, the most due partitions and bytes first."""

    @property
    def due_share(self) -> float:
        """The share of the fleet's partitions that are due (0 without partitions)."""
        return self.partitions_due / self.partitions if self.partitions else 0.0

    @property
    def tasks_text(self) -> str:
        """The open plans' tasks by state as people read them: "Executing 2, Pending 7"."""
        return ", ".join(f"{state} {n}" for state, n in self.tasks.items()) or "none"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fleet_status(conn: Connection, top: int | None = None) -> FleetStatus:
    """The fleet now; ``debts`` holds the ``top`` tables that owe the most (all: None)."""
    tables, partitions = conn.execute(
        "SELECT (SELECT count(*) FROM catalog_table), (SELECT count(*) FROM catalog_partition)"
    ).fetchone() or (0, 0)
    backlog: dict[int, dict[str, float | None]] = defaultdict(dict)
    for table_id, key, age in conn.execute(BACKLOG).fetchall():
        backlog[table_id][key] = None if age is None else round(float(age), 3)
    named = _named(conn, list(backlog))
    backlog = {tid: ages for tid, ages in backlog.items() if tid in named}  # dropped since
    plans, tasks = _open_work(conn)
    read = partition_states_of(
        conn, [TableRead(tid, named[tid][1], list(ages)) for tid, ages in backlog.items()]
    )
    debts, oldest = [], None
    for table_id, ages in backlog.items():
        name, properties = named[table_id]
        states = read.get(table_id, {})
        due = {
            k: d.kind.value for k, s in states.items() if (d := decide(s.metrics, properties)).kind
        }
        for key, kind in due.items():
            waited = ages.get(key)
            if oldest is None or (waited or 0.0) > (oldest.waiting_seconds or 0.0):
                oldest = WaitingPartition(name, key, kind, waited)
        known = [a for a in ages.values() if a is not None]
        debts.append(
            TableDebt(
                table=name,
                partitions_unmerged=len(ages),
                partitions_due=len(due),
                unmerged_files=sum(s.metrics.unmerged_files for s in states.values()),
                unmerged_bytes=sum(s.metrics.unmerged_bytes for s in states.values()),
                oldest_change_seconds=max(known) if known else None,
                open_plans=plans.get(table_id, 0),
            )
        )
    debts.sort(key=lambda d: (-d.partitions_due, -d.unmerged_bytes, d.table))
    return FleetStatus(
        tables=int(tables),
        partitions=int(partitions),
        partitions_unmerged=sum(d.partitions_unmerged for d in debts),
        partitions_due=sum(d.partitions_due for d in debts),
        tables_due=sum(1 for d in debts if d.partitions_due),
        open_plans=sum(plans.values()),
        tasks=tasks,
        oldest_due=oldest,
        debts=debts if top is None else debts[:top],
    )


def _named(conn: Connection, table_ids: list[int]) -> dict[int, tuple[str, TableProperties]]:
    """Each table's name and properties; tables that share their stored properties (a
    fleet made from one template) share one parse of them."""
    parsed: dict[str, TableProperties] = {}
    named = {}
    for table_id, name, stored in conn.execute(TABLES, (table_ids,)).fetchall():
        if stored not in parsed:
            parsed[stored] = TableProperties.from_catalog(json.loads(stored or "{}"), name)
        named[int(table_id)] = (str(name), parsed[stored])
    return named


def _open_work(conn: Connection) -> tuple[dict[int, int], dict[str, int]]:
    """Open plans per table, and their tasks by state."""
    rows = conn.execute(
        "SELECT p.table_id, p.plan_id, t.state, count(t.*) FROM compaction_plan p "
        "LEFT JOIN compaction_task t USING (plan_id) WHERE p.state = ANY(%s) "
        "GROUP BY p.table_id, p.plan_id, t.state",
        ([s.value for s in OPEN_PLAN_STATES],),
    ).fetchall()
    plans: dict[int, set[int]] = defaultdict(set)
    tasks: dict[str, int] = defaultdict(int)
    for table_id, plan_id, state, n in rows:
        plans[table_id].add(plan_id)
        if state is not None:
            tasks[state] += int(n)
    return {t: len(p) for t, p in plans.items()}, dict(sorted(tasks.items()))
