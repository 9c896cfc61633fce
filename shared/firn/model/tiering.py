"""Tiered compaction per unit (issue 15): which units of a partition fold their
change runs into base, and which merge some runs among themselves.

After Paimon's universal compaction for primary-key tables, applied to Firn's tree:

- A **unit** is a node of the hash tree that no file of the partition spans: the
  base write level, or shallower while files of an older bucket count sit above it.
  Units never share keys, so each is compacted on its own.
- A **sorted run** is what one seq wrote into a unit: a producer commit's insert and
  delete files, or the output of an earlier merge of runs. The unit's base files are
  one more run (no key has two live rows among them), the oldest. A read of the unit
  merges all of them, so the number of runs is the unit's read amplification.
- A unit **folds** (major: runs and base become new base) when its runs are large next
  to the base the fold would rewrite (base files whose key range no change meets stay
  as they are, and so do those a deletion vector is sure to cover, ``kept_by_vector``):
  the design §4 major rules (delete bytes, delete ratio, change ratio)
  applied to the unit, with per-node thresholds scaled by the nodes it covers. A
  unit with no such base folds whenever it would merge: writing base then costs no
  more than writing a run, which is what keys arriving in order (an event log) get.
  Untouched and lightly touched units are not rewritten.
- Otherwise, once a unit has ``minor.file-count`` runs, its newest runs merge into
  one (minor: deletes kept, base untouched). At least enough of them to bring the unit
  back to ``minor.file-count`` runs, then each older run while it is no larger than
  what is merged so far (times ``1 + minor.size-ratio``): similar sizes merge
  together, so a byte is rewritten once per size tier instead of at every merge.
- Small base files (under ``small-file-bytes``) pile up: folds keep the base files no
  change touches, so an event log adds one small file at each fold. Once a partition
  passes the design §4 small-file rule, a unit **coalesces** windows of them: files next
  to each other in key order, all small, none larger than a ``COALESCE_FAN_IN``-th of
  the window (``coalesce_windows``), so that a byte is rewritten once per
  ``COALESCE_FAN_IN``-fold (or more) growth of its file, not each time a few small
  files join it. Large files between them stay as they are.
- Base files written under an older **schema version** are read by field id, so a
  schema change rewrites nothing at once; major plans of a partition then rewrite
  them into the current version a step at a time (``schema_step``, after
  OceanBase's progressive merge), oldest version first, paid for by the partition's
  own compaction: since the change, its plans may rewrite old files worth
  ``schema.rewrite-ratio`` times the bytes they wrote for their changes
  (``firn.catalog.schemas.rewrite_budget``), so the schema's rewriting runs at most
  at that multiple of the partition's normal compaction rate: no burst of I/O, and
  a busy partition converges sooner than a quiet one.

Pure: the caller turns units into tasks (``firn.engine.policies.tiered_runs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from firn.model.files import FileEntry
from firn.model.properties import TableProperties
from firn.model.tasks import may_carry_vector
from firn.model.triggers import change_rules


@dataclass(frozen=True)
class Run:
    """One sorted run of a unit: the change files of one seq."""

    seq: int
    insert_bytes: int
    delete_bytes: int

    @property
    def size(self) -> int:
        return self.insert_bytes + self.delete_bytes


@dataclass(frozen=True)
class Unit:
    """What the policy looks at in one unit."""

    runs: tuple[Run, ...]
    """Newest first."""
    base_bytes: int
    """The base a fold would rewrite: files whose key range meets a change (the
    others stay as they are), so a fold's cost, not the unit's size."""
    nodes: int = 1
    """Base-level nodes the unit covers: per-node thresholds are multiplied by it."""

    @property
    def change_bytes(self) -> int:
        return sum(r.size for r in self.runs)

    @property
    def delete_bytes(self) -> int:
        return sum(r.delete_bytes for r in self.runs)

    @property
    def insert_bytes(self) -> int:
        return sum(r.insert_bytes for r in self.runs)


@dataclass(frozen=True)
class UnitPlan:
    """What to do with one unit: fold it, or merge its ``merge`` newest runs."""

    fold: bool
    merge: int
    reasons: tuple[str, ...]


def fold_reasons(unit: Unit, p: TableProperties) -> list[str]:
    """Every major change rule that fires for the unit, with its numbers
    (``firn.model.triggers.change_rules``, on the unit's runs and the base its fold
    would rewrite)."""
    if not unit.runs:
        return []
    return change_rules(
        p,
        inserts=unit.insert_bytes,
        deletes=unit.delete_bytes,
        base=unit.base_bytes,
        runs=len(unit.runs),
        nodes=unit.nodes,
    )


def kept_by_vector(f: FileEntry, change_rows: int, level: int, p: TableProperties) -> bool:
    """Whether a fold task is sure to keep base file ``f`` with a deletion vector
    rather than rewrite it, when at most ``change_rows`` of its change rows have a key
    in ``f``'s range (those of their key spans that meet it): vectors on, ``f`` at the
    fold task's level ``level`` and not tiny (``deletion-vectors.min-file-bytes``), and
    its vector would hide less than ``deletion-vectors.max-ratio`` of its rows even if
    every one of those rows replaced one of them. The executor decides on the keys
    themselves (``firn.engine.vectors``); this bound needs no read, so a file it is
    unsure of counts as rewritten."""
    ratio = p.deletion_vector_ratio
    return (
        may_carry_vector(ratio, f.node.m, level, f.size_bytes, p.vector_min_file_bytes)
        and f.record_count - f.live_rows + change_rows < ratio * f.record_count
    )


def runs_to_merge(runs: Sequence[Run], p: TableProperties) -> int:
    """How many of the newest runs to merge into one (0: none)."""
    trigger = p.minor_file_count
    if len(runs) < trigger:
        return 0
    count = len(runs) - trigger + 1
    size = sum(r.size for r in runs[:count])
    while count < len(runs) and size * (1 + p.minor_size_ratio) >= runs[count].size:
        size += runs[count].size
        count += 1
    return count if count >= 2 else 0


def plan_unit(unit: Unit, p: TableProperties) -> UnitPlan | None:
    """The unit's compaction, or ``None`` when it needs none."""
    if reasons := fold_reasons(unit, p):
        return UnitPlan(True, 0, tuple(reasons))
    merge = runs_to_merge(unit.runs, p)
    if merge == 0:
        return None
    if unit.base_bytes == 0:
        return UnitPlan(True, 0, (f"{len(unit.runs)} runs and no base yet",))
    return UnitPlan(False, merge, (f"{len(unit.runs)} runs: merging the newest {merge}",))


COALESCE_FAN_IN = 3
"""A coalesced window holds at least this many files' worth of its largest file: an
event log's tail of small files grows three-fold or more at each rewrite (at most
log3 rewrites of a row on the way to ``small-file-bytes``), where merging whatever is
small would rewrite the largest of them each time a few new ones join it (log2, or
worse). Three, not more: fold outputs differ in size by a few percent, and a window
of four near-equal files must pass too."""


def coalesce_windows(sizes: Sequence[int], threshold: int) -> list[range]:
    """Which of a unit's base files to merge together, given their sizes in key order:
    disjoint windows of neighbouring files, each file under ``threshold``
    (``small-file-bytes``), whose largest is at most a ``COALESCE_FAN_IN``-th of the
    window's bytes. In each stretch of small files the longest such window is taken,
    then the longest in what is left on either side of it."""
    windows: list[range] = []
    start = 0
    while start < len(sizes):
        if sizes[start] >= threshold:
            start += 1
            continue
        end = start
        while end < len(sizes) and sizes[end] < threshold:
            end += 1
        windows += _balanced(sizes, start, end)
        start = end
    return windows


def _balanced(sizes: Sequence[int], lo: int, hi: int) -> list[range]:
    """The longest balanced window in ``sizes[lo:hi]``, then those on either side."""
    best: range | None = None
    for a in range(lo, hi):
        total = biggest = 0
        for b in range(a, hi):
            total += sizes[b]
            biggest = max(biggest, sizes[b])
            balanced = b > a and biggest * COALESCE_FAN_IN <= total
            if balanced and (best is None or b + 1 - a > len(best)):
                best = range(a, b + 1)
    if best is None:
        return []
    return [*_balanced(sizes, lo, best.start), best, *_balanced(sizes, best.stop, hi)]


def schema_step(base: Sequence[FileEntry], schema_id: int, budget: int) -> list[FileEntry]:
    """The base files written under a schema version older than ``schema_id`` that
    this plan rewrites into it: oldest version first (then oldest file), while their
    bytes stay within ``budget`` (what the partition's compaction has paid for)."""
    old = sorted(
        (f for f in base if f.schema_id < schema_id), key=lambda f: (f.schema_id, f.file_id)
    )
    chosen: list[FileEntry] = []
    used = 0
    for f in old:
        if used + f.size_bytes > budget:
            break
        chosen.append(f)
        used += f.size_bytes
    return chosen


def stays_at_root(p: TableProperties, size_bytes: int, base_all_at_root: bool) -> bool:
    """Whether a partition holding ``size_bytes`` (base plus unmerged changes) keeps
    its base at the root: ``base.split-bytes`` is set, the partition is under it, and
    its base files all sit at the root (or it has none). The one rule behind the
    planner's layout (``laid_out``) and the metrics' misplaced-file count
    (``misplaced_base_files``)."""
    return (
        p.base_split_bytes > 0
        and p.base_buckets != 1
        and base_all_at_root
        and size_bytes < p.base_split_bytes
    )


def laid_out(
    p: TableProperties, base: Sequence[FileEntry], changes: Sequence[FileEntry]
) -> TableProperties:
    """The properties a partition is planned with: ``base.buckets`` 1 while it
    ``stays_at_root``, else the table's. A small partition so keeps one base file that
    one task folds, reading each root change file once (at four nodes every task read
    every such file to keep a quarter of its rows, and a fleet of small tables paid
    four tasks' catalog rows, events and opens per fold); the fold that takes it past
    the threshold writes at ``base.buckets`` (a root base file is shallower than the
    write level, so each node's task reads it and keeps its own rows), and it never
    goes back."""
    size = sum(f.size_bytes for f in base) + sum(f.size_bytes for f in changes)
    at_root = all(f.node.m == 1 for f in base)
    return p.model_copy(update={"base_buckets": 1}) if stays_at_root(p, size, at_root) else p


def misplaced_base_files(
    p: TableProperties, size_bytes: int, off_root: int, off_buckets: int
) -> int:
    """Base files a fold should move: those away from ``base.buckets`` (``off_buckets``
    of them), none while the partition ``stays_at_root`` (``off_root`` of its base
    files are not at the root)."""
    return 0 if stays_at_root(p, size_bytes, off_root == 0) else off_buckets
