"""What a compaction policy is judged by, read from the catalog: the shape of a
table's live files now (``read_store_shape``: the bytes behind space amplification
and the backlog, and the sorted runs a read of each node merges) and the work its
compaction tasks did (``compaction_work``: bytes read and seconds spent executing).
``firn up --demo`` shows both, and ``bench/policy.py`` builds its numbers from them.

Sorted runs (read amplification): a read of one node at the base write level
(``base.buckets``) merges one run for the node's base files, if it has any (no key
has two live rows among them), plus one run per distinct unmerged change
seq: a producer commit writes one run per node, and a minor compaction's insert and
delete outputs carry the minor plan's seq, so they count as one run too. Files at
another level are projected onto the write level as the planner does (a deeper file
to its ancestor, a shallower one to each of its descendants). Nodes holding no live
file are not counted: a read has nothing to merge there.

Compaction work: a task's executing time runs from its move to Executing to its
next move (Prepared, Failed, or back to Pending when its lease expired), from the
catalog's transition history. The dispatcher runs a batch of tasks as one Spark job,
so their intervals overlap; ``busy_seconds`` is the length of the union of all the
intervals (the wall time the table had any task executing), ``task_seconds`` their
sum. Bytes count only attempts that ended Prepared (``input_bytes`` of the task:
every base and change file it reads); failed attempts cost time and give nothing.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from firn.model.states import TaskState
from firn.model.tree import Node
from firn.postgres.connection import Connection


@dataclass(frozen=True)
class StoreShape:
    """A table's live files at its current snapshot."""

    live_bytes: int = 0
    """Bytes of every live file, base and change."""
    base_bytes: int = 0
    base_rows: int = 0
    """Bytes and rows of the live base files."""
    unmerged_bytes: int = 0
    """Bytes of the live change files above their partition's max_merged_seq."""
    runs_per_node: dict[int, int] = field(default_factory=dict)
    """Sorted runs a read of a node merges -> how many nodes (with any live file) need
    that many, over every partition."""

    @property
    def nodes(self) -> int:
        return sum(self.runs_per_node.values())

    @property
    def mean_runs(self) -> float | None:
        """Sorted runs per node, averaged over the nodes; None when no node has files."""
        if not self.nodes:
            return None
        return sum(runs * n for runs, n in self.runs_per_node.items()) / self.nodes

    @property
    def p95_runs(self) -> int | None:
        """Nearest-rank 95th percentile of the sorted runs per node."""
        return runs_quantile(self.runs_per_node, 0.95)


def runs_quantile(histogram: dict[int, int], q: float) -> int | None:
    """The nearest-rank ``q``-quantile (0 < q <= 1) of values given as value -> count;
    None when the counts add up to nothing."""
    total = sum(histogram.values())
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: the ranks add up to the total")


@dataclass(frozen=True)
class FileGroup:
    """The live files of one partition, store, node and seq (a commit's insert and
    delete files of a node, a minor's outputs, or base files of one seq)."""

    partition_key: str
    store: str
    node_m: int
    node_i: int
    seq: int
    size_bytes: int
    """With the bytes of their deletion vectors."""
    record_count: int
    """Live rows: those deletion vectors hide left out."""


def store_shape(
    groups: Iterable[FileGroup], merged: dict[str, int], base_buckets: int
) -> StoreShape:
    """The shape of the live files in ``groups``, given each partition's
    max_merged_seq and the base write level; pure."""
    live = base = base_rows = unmerged = 0
    runs: dict[tuple[str, Node], set[int]] = {}
    has_base: set[tuple[str, Node]] = set()
    projected: dict[tuple[int, int], list[Node]] = {}
    for g in groups:
        live += g.size_bytes
        is_base = g.store == "base"
        fresh = not is_base and g.seq > merged.get(g.partition_key, 0)
        if is_base:
            base += g.size_bytes
            base_rows += g.record_count
        elif fresh:
            unmerged += g.size_bytes
        else:
            continue  # merged change files a major has not removed yet: no run
        at = (g.node_m, g.node_i)
        if at not in projected:
            projected[at] = Node(*at).project(base_buckets)
        for node in projected[at]:
            key = (g.partition_key, node)
            if is_base:
                has_base.add(key)
                runs.setdefault(key, set())
            else:
                runs.setdefault(key, set()).add(g.seq)
    histogram = Counter(len(seqs) + (key in has_base) for key, seqs in runs.items())
    return StoreShape(
        live_bytes=live,
        base_bytes=base,
        base_rows=base_rows,
        unmerged_bytes=unmerged,
        runs_per_node=dict(sorted(histogram.items())),
    )


def read_store_shape(conn: Connection, table_id: int) -> StoreShape:
    """The shape now: one scan of the live files (the partial index on live files
    serves it) grouped by partition, store, node and seq, cheap enough for every
    progress tick; the rest is ``store_shape``."""
    level = conn.execute(
        "SELECT (properties->>'base.buckets')::int FROM catalog_table WHERE table_id = %s",
        (table_id,),
    ).fetchone()
    if level is None:
        return StoreShape()
    merged = {
        str(part): int(seq)
        for part, seq in conn.execute(
            "SELECT partition_key, max_merged_seq FROM catalog_partition WHERE table_id = %s",
            (table_id,),
        ).fetchall()
    }
    rows = conn.execute(
        # A deletion vector's bytes are stored bytes; the rows it hides are not live.
        "SELECT partition_key, store, node_m, node_i, seq, "
        "sum(size_bytes + coalesce(dv_size_bytes, 0)), sum(record_count - coalesce(dv_rows, 0)) "
        "FROM data_file WHERE table_id = %s AND removed_snapshot IS NULL "
        "GROUP BY partition_key, store, node_m, node_i, seq",
        (table_id,),
    ).fetchall()
    groups = (
        FileGroup(part, store, int(m), int(i), int(seq), int(size), int(count))
        for part, store, m, i, seq, size, count in rows
    )
    return store_shape(groups, merged, int(level[0]))


@dataclass(frozen=True)
class CompactionWork:
    """What the compaction tasks of a table did (of the plans counted)."""

    tasks: int = 0
    """Attempts that ended Prepared."""
    input_bytes: int = 0
    """Bytes those attempts read: every input file of the task, base and change."""
    task_seconds: float = 0.0
    """Sum of every attempt's executing time (overlapping attempts each count)."""
    busy_seconds: float = 0.0
    """Wall time during which any attempt was executing (the union)."""
    base_bytes: int = 0
    """The share of ``input_bytes`` in base files."""
    base_files: int = 0
    change_files: int = 0
    """Input files those attempts read, summed over the attempts."""

    @property
    def throughput(self) -> float | None:
        """Input bytes per busy second; None before any task ran."""
        if not self.tasks or self.busy_seconds <= 0:
            return None
        return self.input_bytes / self.busy_seconds

    @property
    def mean_task_bytes(self) -> float | None:
        return self.input_bytes / self.tasks if self.tasks else None

    def as_dict(self) -> dict[str, float | int | None]:
        throughput, mean, n = self.throughput, self.mean_task_bytes, self.tasks
        return {
            "tasks": n,
            "input_bytes": self.input_bytes,
            "mean_task_input_bytes": None if mean is None else round(mean),
            "base_share": round(self.base_bytes / self.input_bytes, 3)
            if self.input_bytes
            else None,
            "mean_task_base_files": round(self.base_files / n, 2) if n else None,
            "mean_task_change_files": round(self.change_files / n, 2) if n else None,
            "task_seconds": round(self.task_seconds, 3),
            "busy_seconds": round(self.busy_seconds, 3),
            "bytes_per_busy_s": None if throughput is None else round(throughput),
        }


def union_seconds(intervals: Iterable[tuple[dt.datetime, dt.datetime]]) -> float:
    """The length of the union of time intervals, in seconds."""
    spans: list[list[dt.datetime]] = []
    for lo, hi in sorted(intervals):
        if spans and lo <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], hi)
        else:
            spans.append([lo, hi])
    return sum((hi - lo).total_seconds() for lo, hi in spans)


def compaction_work(conn: Connection, table_id: int, after_plan: int = 0) -> CompactionWork:
    """The executing attempts of the table's tasks in plans above ``after_plan``
    (``progress.last_plan_id``); attempts still executing are not counted."""
    rows = conn.execute(
        "SELECT at, next_at, next_state, input_bytes, base_bytes, base_files, change_files "
        "FROM (SELECT s.to_state, s.at, lead(s.at) OVER w AS next_at, "
        "lead(s.to_state) OVER w AS next_state, t.input_bytes, "
        "(SELECT coalesce(sum((f->>'size_bytes')::bigint), 0) "
        "FROM jsonb_array_elements(t.spec->'base_files') f) AS base_bytes, "
        "jsonb_array_length(t.spec->'base_files') AS base_files, "
        "jsonb_array_length(t.spec->'change_files') AS change_files "
        "FROM state_transition s JOIN compaction_task t ON t.task_id = s.entity_id "
        "JOIN compaction_plan p ON p.plan_id = t.plan_id "
        "WHERE s.machine = 'task' AND p.table_id = %s AND p.plan_id > %s "
        "WINDOW w AS (PARTITION BY s.entity_id ORDER BY s.transition_id)) moves "
        "WHERE to_state = %s AND next_at IS NOT NULL",
        (table_id, after_plan, TaskState.EXECUTING.value),
    ).fetchall()
    intervals = [(row[0], row[1]) for row in rows]
    done = [row[3:] for row in rows if row[2] == TaskState.PREPARED.value]
    return CompactionWork(
        tasks=len(done),
        input_bytes=sum(int(d[0]) for d in done),
        task_seconds=sum((hi - lo).total_seconds() for lo, hi in intervals),
        busy_seconds=union_seconds(intervals),
        base_bytes=sum(int(d[1]) for d in done),
        base_files=sum(int(d[2]) for d in done),
        change_files=sum(int(d[3]) for d in done),
    )
