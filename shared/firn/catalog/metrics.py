"""Partition metrics from the catalog (design §4): what the triggers and the score read.

One query computes, for every partition of the tables asked for (up to
``STATES_PER_QUERY`` of them), the unmerged change bytes and files, the live base
files, the small files and the busiest change node (its sorted runs: one per seq).
The metrics service keeps the same numbers incrementally from events and calls this
to reconcile; ``Table.status`` and ``firn status --fleet`` call it to show them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from firn.model.properties import TableProperties
from firn.model.tiering import misplaced_base_files
from firn.model.tree import Node
from firn.model.triggers import PartitionMetrics
from firn.postgres.connection import Connection

_QUERY = """
WITH wanted AS (
    -- A row per table read whole, or per partition asked for (a compaction event's
    -- reading costs its partition, not the table), with its table's thresholds.
    SELECT * FROM unnest(%(tables)s::bigint[], %(keys)s::text[], %(small)s::bigint[],
                         %(buckets)s::int[]) AS w(table_id, partition_key, small, buckets)
), parts AS (
    -- Each table's partitions, and below each partition's live files, through the
    -- indexes a table or partition at a time (OFFSET 0 keeps each subquery a
    -- parameterized scan): joined whole, a few hundred tables' rows made Postgres
    -- scan catalog_partition and data_file (removed files and all), so a fleet's
    -- check or status cost more as the catalog and its history grew.
    SELECT p.table_id, p.partition_key, p.max_seq, p.max_merged_seq, p.last_major_at,
           w.small, w.buckets
    FROM wanted w CROSS JOIN LATERAL (
        SELECT * FROM catalog_partition p WHERE p.table_id = w.table_id {only_partition}
        OFFSET 0
    ) p
), live AS (
    SELECT p.table_id, p.partition_key, f.store, f.file_type, f.node_m, f.node_i, f.seq,
           f.size_bytes, f.store = 'change' AND f.seq > p.max_merged_seq AS unmerged
    FROM parts p CROSS JOIN LATERAL (
        SELECT f.store, f.file_type, f.node_m, f.node_i, f.seq, f.size_bytes FROM data_file f
        WHERE f.table_id = p.table_id AND f.partition_key = p.partition_key
          AND f.removed_snapshot IS NULL
        OFFSET 0
    ) f
), counted AS (
    SELECT table_id, partition_key, node_m, node_i, count(DISTINCT seq) AS n FROM live
    WHERE unmerged GROUP BY table_id, partition_key, node_m, node_i
), per_node AS (
    -- A node's reads merge its own runs and those of its ancestors' files (a small
    -- commit's partition written at the root, change.buckets changed): a commit's
    -- files sit at one level of a partition, so the counts add up without overlap.
    SELECT table_id, partition_key, max(runs) AS busiest FROM (
        SELECT c.table_id, c.partition_key, sum(a.n) AS runs FROM counted c
        JOIN counted a ON a.table_id = c.table_id AND a.partition_key = c.partition_key
            AND a.node_m <= c.node_m AND c.node_i %% a.node_m = a.node_i
        GROUP BY c.table_id, c.partition_key, c.node_m, c.node_i
    ) nodes GROUP BY table_id, partition_key
)
SELECT p.table_id, p.partition_key,
       coalesce(sum(l.size_bytes) FILTER (WHERE l.unmerged AND l.file_type = 'I'), 0),
       coalesce(sum(l.size_bytes) FILTER (WHERE l.unmerged AND l.file_type = 'D'), 0),
       count(l.*) FILTER (WHERE l.unmerged),
       coalesce(sum(l.size_bytes) FILTER (WHERE l.store = 'base'), 0),
       count(l.*) FILTER (WHERE l.store = 'base'),
       count(l.*) FILTER (WHERE l.unmerged OR (l.store = 'base' AND l.size_bytes < p.small)),
       coalesce(max(n.busiest), 0),
       extract(epoch FROM now() - p.last_major_at),
       -- Base files away from the root and from base.buckets: which of them are
       -- misplaced is firn.model.tiering.misplaced_base_files'.
       count(l.*) FILTER (WHERE l.store = 'base' AND l.node_m <> 1),
       count(l.*) FILTER (WHERE l.store = 'base' AND l.node_m <> p.buckets),
       p.max_seq, p.max_merged_seq, extract(epoch FROM p.last_major_at),
       (SELECT coalesce(max(snapshot_id), 0) FROM snapshot s WHERE s.table_id = p.table_id),
       (SELECT coalesce(max(plan_id), 0) FROM compaction_plan c WHERE c.table_id = p.table_id
        AND c.partition_key = p.partition_key AND c.state = 'Committed'),
       -- When the oldest unmerged change was committed (its commit snapshot, by the
       -- commit-seq index), and now: how long a partition never folded has waited. A
       -- commit whose snapshot row retention pruned is older than snapshot.retention:
       -- counted as old as can be ('epoch'), so its partition is not left unfolded.
       CASE WHEN count(l.*) FILTER (WHERE l.unmerged) > 0 THEN extract(epoch FROM coalesce((
           SELECT min(s.created_at) FROM snapshot s WHERE s.table_id = p.table_id
           AND s.kind = 'commit' AND s.seq = min(l.seq) FILTER (WHERE l.unmerged)),
           'epoch'::timestamptz)) END,
       extract(epoch FROM now())
FROM parts p
LEFT JOIN live l USING (table_id, partition_key)
LEFT JOIN per_node n USING (table_id, partition_key)
GROUP BY p.table_id, p.partition_key, p.last_major_at, p.max_seq, p.max_merged_seq,
         p.small, p.buckets
ORDER BY p.table_id, p.partition_key
"""

STATES_PER_QUERY = 200
"""Most tables ``partition_states_of`` reads in one statement: a fleet's check or
status is a few statements, not one per table, and none of them runs for long."""


@dataclass(frozen=True)
class PartitionState:
    """A partition's metrics with the positions they were read at: what the metrics
    service reconciles its event-built counters against. One SQL statement reads it
    all, so ``snapshot_id`` is exactly the table snapshot the numbers include."""

    metrics: PartitionMetrics
    max_seq: int
    max_merged_seq: int
    last_major_at: float | None
    """Epoch seconds of the last major compaction; None if there never was one."""
    snapshot_id: int
    """The table's newest snapshot when read: every commit up to it is counted."""
    last_plan: int
    """The partition's newest committed compaction plan; 0 if none."""
    oldest_change_at: float | None = None
    """Epoch seconds of the oldest unmerged change's commit; None if none."""


def partition_metrics(
    conn: Connection, table_id: int, properties: TableProperties
) -> dict[str, PartitionMetrics]:
    """Every partition's metrics as of now."""
    states = partition_states(conn, table_id, properties)
    return {part: state.metrics for part, state in states.items()}


def partition_states(
    conn: Connection,
    table_id: int,
    properties: TableProperties,
    partition_keys: Collection[str] | None = None,
) -> dict[str, PartitionState]:
    """Every partition's metrics and read positions as of now; only ``partition_keys``'
    when given (a compaction event's reading costs its partition, not the table)."""
    found = partition_states_of(conn, [TableRead(table_id, properties, partition_keys)])
    return found.get(table_id, {})


@dataclass(frozen=True)
class TableRead:
    """One table whose partitions ``partition_states_of`` reads: all of them, or only
    ``partition_keys``."""

    table_id: int
    properties: TableProperties
    partition_keys: Collection[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.partition_keys, str):  # a str is a Collection[str] of letters
            raise TypeError("partition_keys takes a collection of partition keys, not one key")


def partition_states_of(
    conn: Connection, reads: Sequence[TableRead]
) -> dict[int, dict[str, PartitionState]]:
    """``partition_states`` of many tables, per table id: one statement for up to
    ``STATES_PER_QUERY`` tables, each statement one MVCC snapshot of its tables. The
    tables read whole and those read in part go in separate statements."""
    found: dict[int, dict[str, PartitionState]] = {}
    whole = [r for r in reads if r.partition_keys is None]
    some = [r for r in reads if r.partition_keys is not None]
    for group, pairs in ((whole, False), (some, True)):
        for start in range(0, len(group), STATES_PER_QUERY):
            chunk = group[start : start + STATES_PER_QUERY]
            for table_id, key, state in _states(conn, chunk, pairs):
                found.setdefault(table_id, {})[key] = state
    return found


def _states(
    conn: Connection, reads: Sequence[TableRead], pairs: bool
) -> list[tuple[int, str, PartitionState]]:
    rows: list[tuple[int, str | None, TableProperties]] = [
        (r.table_id, key, r.properties)
        for r in reads
        for key in (sorted(set(r.partition_keys or ())) if pairs else [None])
    ]
    if not rows:
        return []
    query = _QUERY.format(
        only_partition="AND p.partition_key = w.partition_key" if pairs else "",
    )
    params = {
        "tables": [table_id for table_id, _, _ in rows],
        "keys": [key for _, key, _ in rows],
        "small": [props.small_file_threshold for _, _, props in rows],
        "buckets": [props.base_buckets for _, _, props in rows],
    }
    by_id = {r.table_id: r.properties for r in reads}
    return [
        (
            int(row[0]),
            str(row[1]),
            PartitionState(
                metrics=_metrics(by_id[int(row[0])], row[2:12], row[17], row[18]),
                max_seq=int(row[12]),
                max_merged_seq=int(row[13]),
                last_major_at=None if row[14] is None else float(row[14]),
                snapshot_id=int(row[15]),
                last_plan=int(row[16]),
                oldest_change_at=None if row[17] is None else float(row[17]),
            ),
        )
        for row in conn.execute(query, params).fetchall()
    ]


def _metrics(
    properties: TableProperties, row: Any, oldest_change_at: Any, now: Any
) -> PartitionMetrics:
    ins, dels, files, base_bytes, base_files, small, busiest, age, off_root, off_buckets = row
    size = int(base_bytes) + int(ins) + int(dels)
    misplaced = misplaced_base_files(properties, size, int(off_root), int(off_buckets))
    return PartitionMetrics(
        unmerged_insert_bytes=int(ins),
        unmerged_delete_bytes=int(dels),
        unmerged_files=int(files),
        base_bytes=int(base_bytes),
        base_files=int(base_files),
        small_files=int(small),
        max_runs_per_node=int(busiest),
        seconds_since_major=None if age is None else float(age),
        misplaced_base_files=int(misplaced),
        oldest_change_seconds=(
            None if oldest_change_at is None else float(now) - float(oldest_change_at)
        ),
    )


def busiest_nodes(
    conn: Connection, table_id: int, partition_keys: Sequence[str]
) -> dict[str, tuple[str, int]]:
    """Per partition, the change node with the most sorted runs (unmerged change
    seqs, its own and its ancestors') and how many; partitions without unmerged
    changes are left out."""
    rows = conn.execute(
        "SELECT f.partition_key, f.node_m, f.node_i, count(DISTINCT f.seq) FROM data_file f "
        "JOIN catalog_partition p USING (table_id, partition_key) "
        "WHERE f.table_id = %s AND f.partition_key = ANY(%s) AND f.store = 'change' "
        "AND f.removed_snapshot IS NULL AND f.seq > p.max_merged_seq "
        "GROUP BY f.partition_key, f.node_m, f.node_i",
        (table_id, list(partition_keys)),
    ).fetchall()
    runs: dict[str, dict[Node, int]] = {}
    for part, m, i, n in rows:
        runs.setdefault(part, {})[Node(int(m), int(i))] = int(n)
    busiest = {}
    for part, nodes in runs.items():
        totals = {
            node: sum(n for other, n in nodes.items() if other.is_ancestor_or_self_of(node))
            for node in nodes
        }
        node = max(sorted(totals), key=lambda n: totals[n])
        busiest[part] = (str(node), totals[node])
    return busiest


@dataclass(frozen=True)
class Changes:
    """What the periodic check reads: per table, the partitions to read (None: all)."""

    partitions: dict[int, set[str] | None]
    high_water: int
    """The greatest change stamp seen: the next check reads what is stamped after it."""


def changed_partitions(conn: Connection, since: int) -> Changes:
    """Partitions stamped after ``since`` (migration 0015), partitions with unmerged
    changes (their time triggers move on their own), and every partition of a table
    whose properties or schema changed after ``since``. Index scans only: its cost
    follows the changes and the backlog, not the catalog."""
    rows = conn.execute(
        "SELECT table_id, partition_key, changed FROM catalog_partition "
        "WHERE changed > %(since)s OR max_seq > max_merged_seq "
        "UNION ALL SELECT table_id, NULL, definition_changed FROM catalog_table "
        "WHERE definition_changed > %(since)s",
        {"since": since},
    ).fetchall()
    partitions: dict[int, set[str] | None] = {}
    high = since
    for table_id, key, stamp in rows:
        high = max(high, int(stamp))
        if key is None:
            partitions[int(table_id)] = None
        elif (known := partitions.setdefault(int(table_id), set())) is not None:
            known.add(str(key))
    return Changes(partitions, high)


def change_stamp(conn: Connection) -> int:
    """The newest stamp the change sequence handed out (0 before the first)."""
    row = conn.execute("SELECT last_value, is_called FROM partition_change_seq").fetchone()
    return int(row[0]) if row and row[1] else 0
