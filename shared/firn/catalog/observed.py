"""What the Prometheus metrics read from the catalog (docs/operations/monitoring.md).

``read_catalog`` takes one reading of every table: per partition the figures the
triggers use (``metrics.partition_metrics``) with its score and the age of its last
compaction, the tasks by state, and per table the change nodes at the
``write.stall-runs`` limit (what makes ``Table.commit`` report ``stalled``). A few
queries per table; the metrics service runs it when Prometheus scrapes, under a
statement timeout.

``compaction_latencies`` gives, for one committed plan, how long each producer
commit it merged into the base store had waited: the committer observes them once,
when it commits the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from firn.catalog.metrics import partition_metrics
from firn.model.properties import TableProperties
from firn.model.states import PlanState
from firn.model.triggers import score
from firn.postgres.connection import Connection


@dataclass(frozen=True)
class PartitionFigures:
    """One partition's backlog as of a reading."""

    table: str
    partition: str
    unmerged_files: int
    unmerged_bytes: int
    score: float
    max_runs_per_node: int
    """Read amplification: sorted runs a read of the busiest change node merges."""
    seconds_since_compaction: float | None
    """Since the partition's last committed compaction of any kind; None if none."""


@dataclass(frozen=True)
class CatalogReading:
    """Every table's figures at one moment."""

    partitions: list[PartitionFigures] = field(default_factory=list)
    tasks: dict[tuple[str, str], int] = field(default_factory=dict)
    """(table, task state) -> tasks in that state."""
    stalled_nodes: dict[str, int] = field(default_factory=dict)
    """Table -> change nodes with ``write.stall-runs`` sorted runs or more (every
    table, 0 when none is; tables with back-pressure off are left out)."""


def read_catalog(conn: Connection) -> CatalogReading:
    tables = conn.execute("SELECT table_id, name, properties FROM catalog_table").fetchall()
    ages = {
        (int(table_id), str(part)): float(age)
        for table_id, part, age in conn.execute(
            "SELECT table_id, partition_key, extract(epoch FROM now() - max(updated_at)) "
            "FROM compaction_plan WHERE state = %s GROUP BY table_id, partition_key",
            (PlanState.COMMITTED.value,),
        ).fetchall()
    }
    names = {int(table_id): str(name) for table_id, name, _ in tables}
    reading = CatalogReading()
    for table_id, name, stored in tables:
        properties = TableProperties.from_catalog(stored, name)
        for part, m in partition_metrics(conn, table_id, properties).items():
            reading.partitions.append(
                PartitionFigures(
                    table=name,
                    partition=part,
                    unmerged_files=m.unmerged_files,
                    unmerged_bytes=m.unmerged_bytes,
                    score=score(m, properties),
                    max_runs_per_node=m.max_runs_per_node,
                    seconds_since_compaction=ages.get((table_id, part)),
                )
            )
        if properties.write_stall_runs:
            reading.stalled_nodes[name] = _nodes_with_runs(
                conn, table_id, properties.write_stall_runs
            )
    for table_id, state, n in conn.execute(
        "SELECT p.table_id, t.state, count(*) FROM compaction_task t "
        "JOIN compaction_plan p USING (plan_id) GROUP BY p.table_id, t.state"
    ).fetchall():
        if int(table_id) in names:  # a table dropped between the two queries
            reading.tasks[(names[int(table_id)], str(state))] = int(n)
    return reading


def _nodes_with_runs(conn: Connection, table_id: int, at_least: int) -> int:
    """Change nodes (as committed, like ``metrics.busiest_nodes``) whose unmerged
    sorted runs reach ``at_least``."""
    row = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM data_file f "
        "JOIN catalog_partition p USING (table_id, partition_key) "
        "WHERE f.table_id = %s AND f.store = 'change' AND f.removed_snapshot IS NULL "
        "AND f.seq > p.max_merged_seq GROUP BY f.partition_key, f.node_m, f.node_i "
        "HAVING count(DISTINCT f.seq) >= %s) nodes",
        (table_id, at_least),
    ).fetchone()
    return int(row[0]) if row else 0


def compaction_latencies(conn: Connection, plan_id: int) -> list[float]:
    """Per producer commit that committed plan ``plan_id`` merged into the base
    store (its partition's ``max_merged_seq`` passed the commit's seq), the seconds
    from the commit's snapshot to the plan's. A plan that merged nothing (a minor,
    or a fold that left runs behind) gives none.

    Three lookups by key rather than one join: the committer runs this after every
    fold, while the catalog's tables grow from nothing, and with statistics from when
    they were empty Postgres planned the join as a scan of every file of the table per
    commit (0.1-0.6 s per plan two minutes into ten commits a second)."""
    plan = conn.execute(
        "SELECT p.table_id, p.partition_key, p.from_merged_seq, h.max_merged_seq, "
        "m.created_at FROM compaction_plan p "
        "JOIN partition_merge_history h ON h.table_id = p.table_id "
        "AND h.partition_key = p.partition_key AND h.snapshot_id = p.committed_snapshot "
        "JOIN snapshot m ON m.table_id = p.table_id AND m.snapshot_id = p.committed_snapshot "
        "WHERE p.plan_id = %s",
        (plan_id,),
    ).fetchone()
    if plan is None:
        return []
    return merge_latencies(conn, *plan)


def merge_latencies(
    conn: Connection,
    table_id: int,
    partition: str,
    from_seq: int,
    to_seq: int,
    merged_at: datetime,
) -> list[float]:
    """``compaction_latencies`` of a plan known already: it moved ``partition``'s
    ``max_merged_seq`` from ``from_seq`` to ``to_seq`` in a snapshot made at
    ``merged_at`` (the committer has these from the commit, and skips the lookup)."""
    # One round trip, two lookups by key: the partition's change files in the seq
    # range (an index range), then their producer commits' snapshots by id. The
    # array is computed first whatever the statistics say, so no plan can turn this
    # into a scan of the table's files (``compaction_latencies`` says why that matters).
    made = conn.execute(
        "SELECT created_at FROM snapshot WHERE table_id = %(t)s AND kind = 'commit' "
        "AND snapshot_id = ANY(ARRAY(SELECT DISTINCT added_snapshot FROM data_file "
        "WHERE table_id = %(t)s AND partition_key = %(p)s AND store = 'change' "
        "AND seq > %(lo)s AND seq <= %(hi)s))",
        {"t": table_id, "p": partition, "lo": from_seq, "hi": to_seq},
    ).fetchall()
    return [(merged_at - created_at).total_seconds() for (created_at,) in made]
