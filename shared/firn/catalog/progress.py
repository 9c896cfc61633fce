"""How far compaction of one table has come: a cheap reading of its counters
(``read_progress``, for a live display such as ``firn up --demo``, with the shape of
its live files from ``amplification.py``) and the
commit-to-compacted latency of its commits (``commit_points``, ``merge_points`` and
the pure ``latency_summary``).

Latency: a commit's rows in partition P are *compacted* by the first snapshot as of
which P's ``max_merged_seq`` reaches the commit's seq (design §2: from then on readers
take them from the base store), so the latency is that snapshot's ``created_at``
minus the commit snapshot's. Both are the database's clock. A commit that touched
several partitions counts once per partition; minor compactions leave
``max_merged_seq`` where it was and so compact nothing in this sense. Commits are
found through the change files they added, so commits whose files retention has
already deleted from the catalog are no longer counted.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from firn.catalog.amplification import StoreShape, read_store_shape
from firn.model.states import PlanState, TaskState
from firn.postgres.connection import Connection

_OPEN_PLANS = [s.value for s in (PlanState.PLANNED, PlanState.EXECUTING, PlanState.COMMITTING)]


@dataclass(frozen=True)
class ProgressReading:
    """One table's compaction counters at one moment."""

    seq: int
    """The table's greatest commit seq (every producer commit takes one)."""
    unmerged_files: int
    """Live change files above their partition's max_merged_seq, summed over partitions."""
    open_plans: int
    tasks: dict[str, int] = field(default_factory=dict)
    """The table's tasks by state (of the plans counted, see ``read_progress``)."""
    compactions: dict[str, int] = field(default_factory=dict)
    """Committed plans by kind (major, minor, full, bin-pack)."""
    last_compaction_wait: float | None = None
    """Seconds the oldest change folded in by the newest major/full compaction waited
    for it (commit to compaction snapshot); None before the first one."""
    shape: StoreShape = field(default_factory=StoreShape)
    """Bytes of the live files and sorted runs per node (``amplification.py``)."""

    @property
    def compacted(self) -> int:
        return sum(self.compactions.values())


def read_progress(conn: Connection, table_id: int, after_plan: int = 0) -> ProgressReading:
    """The counters now; a few indexed queries, cheap enough to run every second.

    Tasks and compactions count only plans with ids above ``after_plan`` (see
    ``last_plan_id``), so a reading can describe one run on a table with a history."""
    head = conn.execute(
        "SELECT last_seq FROM catalog_table WHERE table_id = %s", (table_id,)
    ).fetchone()
    unmerged = conn.execute(
        "SELECT count(*) FROM data_file f JOIN catalog_partition p USING (table_id, "
        "partition_key) WHERE f.table_id = %s AND f.removed_snapshot IS NULL "
        "AND f.store = 'change' AND f.seq > p.max_merged_seq",
        (table_id,),
    ).fetchone()
    plans = conn.execute(
        "SELECT count(*) FILTER (WHERE state = ANY(%s)) FROM compaction_plan WHERE table_id = %s",
        (_OPEN_PLANS, table_id),
    ).fetchone()
    tasks = conn.execute(
        "SELECT t.state, count(*) FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %s AND p.plan_id > %s GROUP BY t.state",
        (table_id, after_plan),
    ).fetchall()
    kinds = conn.execute(
        "SELECT kind, count(*) FROM compaction_plan WHERE table_id = %s AND plan_id > %s "
        "AND state = %s GROUP BY kind",
        (table_id, after_plan, PlanState.COMMITTED.value),
    ).fetchall()
    return ProgressReading(
        seq=int(head[0]) if head else 0,
        unmerged_files=int(unmerged[0]) if unmerged else 0,
        open_plans=int(plans[0]) if plans else 0,
        tasks=_in_state_order(dict(tasks)),
        compactions={kind: int(n) for kind, n in sorted(kinds)},
        last_compaction_wait=_last_compaction_wait(conn, table_id),
        shape=read_store_shape(conn, table_id),
    )


def last_plan_id(conn: Connection, table_id: int) -> int:
    """The table's newest plan id (0 if it has none): a baseline for ``read_progress``."""
    row = conn.execute(
        "SELECT coalesce(max(plan_id), 0) FROM compaction_plan WHERE table_id = %s", (table_id,)
    ).fetchone()
    return int(row[0]) if row else 0


def _in_state_order(counts: dict[str, int]) -> dict[str, int]:
    return {s.value: int(counts[s.value]) for s in TaskState if s.value in counts}


def _last_compaction_wait(conn: Connection, table_id: int) -> float | None:
    row = conn.execute(
        "WITH last AS (SELECT p.partition_key, p.from_merged_seq, p.to_seq, s.created_at "
        "FROM compaction_plan p JOIN snapshot s ON s.table_id = p.table_id "
        "AND s.snapshot_id = p.committed_snapshot WHERE p.table_id = %(t)s "
        "AND p.state = %(committed)s AND p.kind <> 'minor' "
        "ORDER BY p.committed_snapshot DESC LIMIT 1) "
        "SELECT extract(epoch FROM last.created_at - min(c.created_at)) FROM last "
        "JOIN snapshot c ON c.table_id = %(t)s AND c.kind = 'commit' "
        "AND c.seq > last.from_merged_seq AND c.seq <= last.to_seq "
        "WHERE EXISTS (SELECT 1 FROM data_file f WHERE f.table_id = %(t)s "
        "AND f.added_snapshot = c.snapshot_id AND f.partition_key = last.partition_key) "
        "GROUP BY last.created_at",
        {"t": table_id, "committed": PlanState.COMMITTED.value},
    ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


# -- commit-to-compacted latency -------------------------------------------------


@dataclass(frozen=True)
class CommitPoint:
    """A producer commit as seen by one partition it wrote to."""

    partition: str
    seq: int
    at: dt.datetime


@dataclass(frozen=True)
class MergePoint:
    """A snapshot that moved one partition's max_merged_seq."""

    partition: str
    snapshot_id: int
    max_merged_seq: int
    at: dt.datetime


@dataclass(frozen=True)
class LatencySummary:
    """Commit-to-compacted latency over (commit, partition) pairs, in seconds."""

    compacted: int
    """Pairs already compacted: the ones the statistics describe."""
    waiting: int
    """Pairs not compacted yet."""
    median: float | None = None
    p95: float | None = None
    """Nearest-rank 95th percentile."""
    max: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "compacted": self.compacted,
            "waiting": self.waiting,
            "median_s": _rounded(self.median),
            "p95_s": _rounded(self.p95),
            "max_s": _rounded(self.max),
        }


def latency_summary(commits: Iterable[CommitPoint], merges: Iterable[MergePoint]) -> LatencySummary:
    """For each commit, the time until the first merge of its partition that reached
    its seq; pure, so the rule can be tested on a made-up history."""
    by_partition: dict[str, list[MergePoint]] = defaultdict(list)
    for merge in merges:
        by_partition[merge.partition].append(merge)
    # Per partition, in snapshot order, the greatest max_merged_seq reached so far:
    # non-decreasing, so the first merge reaching a seq is found by bisection.
    reached: dict[str, tuple[list[int], list[MergePoint]]] = {}
    for partition, points in by_partition.items():
        points.sort(key=lambda m: m.snapshot_id)
        highest, running = [], 0
        for point in points:
            running = max(running, point.max_merged_seq)
            highest.append(running)
        reached[partition] = (highest, points)
    latencies: list[float] = []
    waiting = 0
    for commit in commits:
        highest, points = reached.get(commit.partition, ([], []))
        at = bisect.bisect_left(highest, commit.seq)
        if at == len(highest):
            waiting += 1
            continue
        latencies.append((points[at].at - commit.at).total_seconds())
    if not latencies:
        return LatencySummary(compacted=0, waiting=waiting)
    return LatencySummary(
        compacted=len(latencies),
        waiting=waiting,
        median=statistics.median(latencies),
        p95=percentile(latencies, 0.95),
        max=max(latencies),
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-quantile (0 < q <= 1) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def commit_points(conn: Connection, table_id: int, after_seq: int = 0) -> list[CommitPoint]:
    """Every producer commit with seq above ``after_seq``, once per partition it wrote."""
    rows = conn.execute(
        "SELECT DISTINCT f.partition_key, s.seq, s.created_at FROM snapshot s "
        "JOIN data_file f ON f.table_id = s.table_id AND f.added_snapshot = s.snapshot_id "
        "WHERE s.table_id = %s AND s.kind = 'commit' AND s.seq > %s",
        (table_id, after_seq),
    ).fetchall()
    return [CommitPoint(part, int(seq), at) for part, seq, at in rows]


def merge_points(conn: Connection, table_id: int) -> list[MergePoint]:
    """Every snapshot that moved a partition's max_merged_seq."""
    rows = conn.execute(
        "SELECT h.partition_key, h.snapshot_id, h.max_merged_seq, s.created_at "
        "FROM partition_merge_history h JOIN snapshot s USING (table_id, snapshot_id) "
        "WHERE h.table_id = %s ORDER BY h.snapshot_id",
        (table_id,),
    ).fetchall()
    return [MergePoint(part, int(snap), int(mms), at) for part, snap, mms, at in rows]


@dataclass(frozen=True)
class WrittenBytes:
    """Bytes written to storage: by producer commits, and by compactions rewriting them."""

    committed: int
    compacted: int

    @property
    def amplification(self) -> float | None:
        """Everything written per byte committed; None before any commit."""
        if self.committed == 0:
            return None
        return (self.committed + self.compacted) / self.committed

    def as_dict(self) -> dict[str, float | int | None]:
        amplification = self.amplification
        return {
            "committed_bytes": self.committed,
            "compacted_bytes": self.compacted,
            "amplification": None if amplification is None else round(amplification, 2),
        }


def written_bytes(conn: Connection, table_id: int, after_snapshot: int = 0) -> WrittenBytes:
    """Bytes of the files added after ``after_snapshot``, live or since removed
    (files already expired by retention are no longer counted). A file a compaction
    moved into base, or kept with a new deletion vector (an earlier row has its
    path), was not written again; the new vector was."""
    row = conn.execute(
        "SELECT coalesce(sum(f.size_bytes) FILTER (WHERE s.kind = 'commit'), 0), "
        "coalesce(sum(CASE WHEN EXISTS (SELECT 1 FROM data_file m WHERE m.table_id = f.table_id "
        "AND m.path = f.path AND m.file_id < f.file_id) THEN 0 ELSE f.size_bytes END "
        "+ coalesce(f.dv_size_bytes, 0)) FILTER (WHERE s.kind = 'compaction'), 0) "
        "FROM data_file f JOIN snapshot s "
        "ON s.table_id = f.table_id AND s.snapshot_id = f.added_snapshot "
        "WHERE f.table_id = %s AND f.added_snapshot > %s",
        (table_id, after_snapshot),
    ).fetchone()
    committed, compacted = row if row is not None else (0, 0)
    return WrittenBytes(int(committed), int(compacted))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
