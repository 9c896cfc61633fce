"""When a partition needs compaction (design §4): pure functions over its metrics.

Thresholds are per node and multiplied by ``n``, the number of nodes at the base
write level, so a table with 16 buckets does not trigger 4x as often as one with 4.
Every rule that fires is reported with its numbers, so ``firn status`` and the logs
can say *why* a partition was planned, not only that it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from firn.model.properties import TableProperties
from firn.model.tasks import Kind


@dataclass(frozen=True)
class PartitionMetrics:
    """What the triggers look at for one partition (unmerged = seq > max_merged_seq)."""

    unmerged_insert_bytes: int
    unmerged_delete_bytes: int
    unmerged_files: int
    base_bytes: int
    base_files: int
    small_files: int
    """Unmerged change files plus base files below ``small-file-bytes``."""
    max_runs_per_node: int
    """The most sorted runs (unmerged change seqs) any one change node has."""
    seconds_since_major: float | None
    """Since the last major compaction; None if there never was one."""
    misplaced_base_files: int = 0
    """Base files at another level than ``base.buckets`` (the bucket count changed):
    a full compaction re-buckets them, a bounded step at a time."""
    oldest_change_seconds: float | None = None
    """Since the commit of the oldest unmerged change; None when there is none (or its
    commit is not known): how long a partition never folded has waited."""

    @property
    def unmerged_bytes(self) -> int:
        return self.unmerged_insert_bytes + self.unmerged_delete_bytes

    @property
    def small_base_files(self) -> int:
        """Base files below ``small-file-bytes`` (every unmerged change file counted
        out, small or not: a lower bound)."""
        return self.small_files - self.unmerged_files


@dataclass(frozen=True)
class Decision:
    """The compaction a partition needs (None: none) and the rules that fired."""

    kind: Kind | None
    reasons: tuple[str, ...]


def change_rules(
    p: TableProperties, *, inserts: int, deletes: int, base: int, runs: int, nodes: int
) -> list[str]:
    """The major rules that weigh changes against the base they would fold into, with
    their numbers: delete bytes, delete ratio, change ratio. One function for the
    partition's trigger (``major_reasons``) and each unit's fold
    (``firn.model.tiering.fold_reasons``), so the two never disagree on a rule.
    Thresholds are per node, times the ``nodes`` weighed."""
    reasons = []
    if deletes >= p.major_delete_bytes * nodes:
        reasons.append(f"delete bytes {deletes} >= {p.major_delete_bytes * nodes}")
    live = base + inserts
    if (
        live > 0
        and deletes / live >= p.major_delete_ratio
        and deletes >= p.major_delete_bytes_lowest * nodes
    ):
        reasons.append(f"delete ratio {deletes / live:.3f} >= {p.major_delete_ratio}")
    changes = inserts + deletes
    if (
        base > 0
        and changes / base >= p.major_change_ratio
        and worth_folding(changes, runs, nodes, p)
    ):
        reasons.append(f"change ratio {changes / base:.3f} >= {p.major_change_ratio}")
    return reasons


def major_reasons(m: PartitionMetrics, p: TableProperties) -> list[str]:
    """Every major rule that fires for the partition, with its numbers: the change
    rules, then small base files and the interval since the last major."""
    n = p.base_buckets
    reasons = change_rules(
        p,
        inserts=m.unmerged_insert_bytes,
        deletes=m.unmerged_delete_bytes,
        base=m.base_bytes,
        runs=m.max_runs_per_node,
        nodes=n,
    )
    worth = worth_folding(m.unmerged_bytes, m.max_runs_per_node, n, p)
    if too_many_small_base_files(m, p):
        reasons.append(f"small base files {m.small_base_files} >= {p.major_file_count * n}")
    if m.unmerged_files > 0 and m.seconds_since_major is None:
        waited = m.oldest_change_seconds
        if worth:
            reasons.append(
                f"unmerged changes and last major never (max {p.major_interval_max:.0f}s)"
            )
        elif waited is not None and waited >= p.major_interval_max:
            # Below major.change-bytes-lowest a partition that went quiet before its
            # minor.file-count-th run would otherwise never fold: its readers merging
            # those runs for good, its rows never in the published Iceberg view.
            reasons.append(
                f"unmerged changes {waited:.0f}s old and last major never "
                f"(max {p.major_interval_max:.0f}s)"
            )
    elif m.unmerged_files > 0 and (
        m.seconds_since_major is not None and m.seconds_since_major >= p.major_interval_max
    ):
        reasons.append(
            f"unmerged changes and last major {m.seconds_since_major:.0f}s ago "
            f"(max {p.major_interval_max:.0f}s)"
        )
    return reasons


def worth_folding(unmerged_bytes: int, runs: int, nodes: int, p: TableProperties) -> bool:
    """Whether changes are enough for the change-ratio and first-fold rules: at least
    ``major.change-bytes-lowest`` per base node, or a node with ``minor.file-count``
    sorted runs. Below both, a small partition's few small runs cost its readers less
    than folding them at every commit costs the compaction service: a fleet of small
    tables otherwise folds every partition after each commit (issue 37), where
    Paimon's universal compaction waits for its sorted-run trigger too. 0 (the
    default until 2026-12-05; 64 KiB since) folds as soon as the ratio says. Below
    both, ``major.interval-max`` still bounds the wait (``major_reasons``)."""
    return unmerged_bytes >= p.major_change_bytes_lowest * nodes or runs >= p.minor_file_count


def too_many_small_base_files(m: PartitionMetrics, p: TableProperties) -> bool:
    """The design §4 small-file rule, on small *base* files only: unmerged change files
    stand for read cost as sorted runs, which the minor trigger and each unit's merges
    answer (issue 15); counting them made every few commits a major folding every
    unit. Answered by rewriting the units that hold several
    (``firn.engine.policies.tiered_runs``)."""
    return m.small_base_files >= p.major_file_count * p.base_buckets


def minor_reasons(m: PartitionMetrics, p: TableProperties) -> list[str]:
    if m.max_runs_per_node > p.minor_file_count:
        return [f"a node has {m.max_runs_per_node} sorted runs > {p.minor_file_count}"]
    return []


def decide(m: PartitionMetrics, p: TableProperties) -> Decision:
    """Full while base files sit at another level than ``base.buckets``; else major
    when any major rule fires; else minor when a node has too many sorted runs."""
    if m.misplaced_base_files:
        reason = f"{m.misplaced_base_files} base files not at base.buckets {p.base_buckets}"
        return Decision(Kind.FULL, (reason,))
    if reasons := major_reasons(m, p):
        return Decision(Kind.MAJOR, tuple(reasons))
    if reasons := minor_reasons(m, p):
        return Decision(Kind.MINOR, tuple(reasons))
    return Decision(None, ())


def score(m: PartitionMetrics, p: TableProperties) -> float:
    """Read amplification the partition causes: unmerged change files per base node,
    weighted by how large the unmerged bytes are next to the base. Higher is served
    first; 0 when there is nothing to merge."""
    if m.unmerged_files == 0:
        return 0.0
    per_node = m.unmerged_files / p.base_buckets
    weight = 1.0 + m.unmerged_bytes / max(m.base_bytes, p.small_file_threshold)
    return round(per_node * weight, 6)
