"""``TieredRuns``: the services' policy (issue 15), unit by unit.

The rule for one unit is ``firn.model.tiering``; this class cuts the partition into
units, asks the rule, and turns its answers into one plan:

- a unit that folds gets the fold tasks ``firn.engine.policies.folding`` makes for a major
  compaction, over that unit's files only (incremental merge and key-range splits
  included), so other units' base files are not rewritten;
- a unit that merges gets one ``minor`` task over the files of its newest runs,
  written back as one run at the unit's node.

A ``major`` request (the partition's major rules fired) folds every unit with
changes when no unit is due on its own numbers, so a partition-level reason such as
``major.interval-max`` is always answered. When the partition's small base files pass
the small-file rule (folds leave untouched base files as they are, so small ones add
up), each unit coalesces its windows of neighbouring small files
(``firn.model.tiering.coalesce_windows``), changes or not: inside the unit's fold
when it folds, else in a task of their own. A unit with no such window but twice the
rule's count of small files is rewritten whole. A ``minor`` request plans only what
the units call for, possibly nothing. Outside the table's off-peak window
(``PartitionFiles.off_peak``, which ``OffPeak`` sets) folds wait, but for units at
the stall limit, and nothing is coalesced.

The committer removes exactly the inputs of each task; the partition's
``max_merged_seq`` moves to S only when no change file at or below S is left, which a
plan that folds some units and not others does not do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from firn.engine.policies.folding import KeyRanges, fold_tasks
from firn.engine.policies.policy import PartitionFiles
from firn.model.files import FileEntry
from firn.model.plans import PlanDraft, PlannedTask
from firn.model.properties import TableProperties
from firn.model.tasks import Kind
from firn.model.tiering import (
    Run,
    Unit,
    UnitPlan,
    coalesce_windows,
    kept_by_vector,
    laid_out,
    plan_unit,
    runs_to_merge,
    schema_step,
)
from firn.model.tree import Node

UnitFiles = dict[Node, list[FileEntry]]


@dataclass(frozen=True)
class TieredRuns:
    kind: Kind = Kind.MAJOR
    """``major``: the partition is due, so some unit folds; ``minor``: only what the
    units call for."""

    def rebucketed(
        self, unit_changes: UnitFiles, unit_base: UnitFiles, properties: TableProperties
    ) -> list[Node]:
        """Units to rewrite whole at ``base.buckets`` whatever their runs say: none
        here (``Rebucket`` chooses some)."""
        return []

    def plan(self, partition: PartitionFiles) -> PlanDraft | None:
        table, changes, base = partition.table, partition.changes, partition.base
        properties = laid_out(partition.properties, base, changes)
        level = unit_level(properties.base_buckets, (*changes, *base))
        unit_changes = _by_unit(changes, level)
        unit_base = _by_unit(base, level)
        rebucketed = self.rebucketed(unit_changes, unit_base, properties)
        for node in rebucketed:
            unit_changes.setdefault(node, [])
        major = self.kind is Kind.MAJOR
        ranges = KeyRanges(table.key_schema)
        coalesced = (
            _coalesced(ranges, unit_base, level, properties)
            if major and not partition.off_peak
            else {}
        )
        if major and not partition.off_peak and level == properties.base_buckets:
            # Base files of older schema versions: the step ``schema_budget`` pays for.
            step = schema_step(base, table.schema_id, partition.schema_budget)
            for node, old in _by_unit(step, level).items():
                together = coalesced.setdefault(node, [])
                together += [f for f in old if f not in together]
        if not unit_changes and not coalesced:
            return None
        nodes = max(1, properties.base_buckets // level)
        # What folding each unit would do: the tasks, and the base files they leave
        # untouched (no change meets their key range). A fold costs the base it
        # rewrites, so that, not the whole base, is what the unit's runs are weighed
        # against: keys that arrive in order fold as they come, without rewriting
        # older base, and base files a deletion vector will cover do not count either.
        folds = {
            node: fold_tasks(table, properties, files_of_unit, unit_base.get(node, []))
            for node, files_of_unit in unit_changes.items()
        }
        decided: dict[Node, UnitPlan] = {}
        for node, files_of_unit in unit_changes.items():
            rewritten = sum(_rewritten_bytes(t, properties, ranges) for t in folds[node][0])
            unit = Unit(runs(files_of_unit), rewritten, nodes)
            if (unit_plan := plan_unit(unit, properties)) is not None:
                decided[node] = unit_plan
        if major and not any(p.fold for p in decided.values()):
            decided = {node: UnitPlan(True, 0, ("the partition is due",)) for node in unit_changes}
        for node in rebucketed:
            reason = f"re-bucketing to base.buckets {properties.base_buckets}"
            decided[node] = UnitPlan(True, 0, (reason,))
        if partition.off_peak:
            decided = _off_peak(decided, unit_changes, properties)
        tasks: list[PlannedTask] = []
        untouched: list[FileEntry] = []
        for node, unit_plan in sorted(decided.items()):
            if node in rebucketed and unit_plan.fold:
                moved, _ = fold_tasks(
                    table, properties, unit_changes[node], unit_base.get(node, []), full=True
                )
                tasks += [replace(t, kind=Kind.FULL) for t in moved]
            elif unit_plan.fold:
                folded, kept = folds[node]
                if node in coalesced:
                    folded, kept = fold_tasks(
                        table,
                        properties,
                        unit_changes[node],
                        unit_base.get(node, []),
                        coalesce=coalesced[node],
                    )
                tasks += [replace(t, kind=Kind.MAJOR) for t in folded]
                untouched += kept
            else:
                newest = {r.seq for r in runs(unit_changes[node])[: unit_plan.merge]}
                merged = tuple(f for f in unit_changes[node] if f.seq in newest)
                tasks.append(PlannedTask(node, None, None, (), merged, kind=Kind.MINOR))
        for node, small in sorted(coalesced.items()):
            if node not in decided or not decided[node].fold:
                merged_small, _ = fold_tasks(
                    table, properties, (), small, full=True, coalesce=small
                )
                tasks += [replace(t, kind=Kind.MAJOR) for t in merged_small]
        if not tasks:
            return None
        kinds = {t.kind for t in tasks}
        plan_kind = next(k for k in (Kind.FULL, Kind.MAJOR, Kind.MINOR) if k in kinds)
        return PlanDraft(
            partition.partition_key,
            plan_kind,
            partition.max_merged_seq,
            partition.to_seq,
            tuple(tasks),
            tuple(untouched),
        )


def _coalesced(
    ranges: KeyRanges,
    unit_base: UnitFiles,
    level: int,
    properties: TableProperties,
) -> UnitFiles:
    """When the partition's small base files reach the small-file rule
    (``major.file-count`` per node), the small base files each unit merges together:
    its windows of neighbouring small files (``coalesce_windows``). A unit with no
    window but twice ``major.file-count`` small files (they sit between large ones, or
    their sizes step up too steeply) gives all its base files: it is rewritten whole,
    which leaves it at most one small file (outputs cut around large files would leave
    small ones between two of them as small as before). Files at another level than
    ``base.buckets`` are the re-bucketing full compaction's to rewrite."""
    if level != properties.base_buckets:
        return {}
    threshold = properties.small_file_threshold
    small = {
        node: sum(f.size_bytes < threshold for f in files) for node, files in unit_base.items()
    }
    if sum(small.values()) < properties.major_file_count * properties.base_buckets:
        return {}
    chosen: UnitFiles = {}
    for node, files in unit_base.items():
        in_order = sorted(files, key=ranges)
        windows = coalesce_windows([f.size_bytes for f in in_order], threshold)
        if windows:
            chosen[node] = [in_order[i] for w in windows for i in w]
        elif small[node] >= 2 * properties.major_file_count:
            chosen[node] = files
    return chosen


def _off_peak(
    decided: dict[Node, UnitPlan], unit_changes: UnitFiles, properties: TableProperties
) -> dict[Node, UnitPlan]:
    """Outside the window: folds wait, but for units at the stall limit (reads come
    first); a unit that would have folded merges its runs instead if they are due."""
    stall = properties.write_stall_runs
    kept: dict[Node, UnitPlan] = {}
    for node, unit_plan in decided.items():
        unit_runs = runs(unit_changes[node])
        if not unit_plan.fold or (stall and len(unit_runs) >= stall):
            kept[node] = unit_plan
        elif merge := runs_to_merge(unit_runs, properties):
            kept[node] = UnitPlan(False, merge, (f"outside {properties.major_window}",))
    return kept


def _rewritten_bytes(task: PlannedTask, properties: TableProperties, ranges: KeyRanges) -> int:
    """The base bytes a fold task is expected to rewrite: its base files but those it
    is sure to keep with a deletion vector, even if every change row whose key span
    meets the file replaced one of its rows."""
    return sum(
        f.size_bytes
        for f in task.base_files
        if not kept_by_vector(f, ranges.rows_meeting(task.change_files, f), task.node.m, properties)
    )


def unit_level(base_buckets: int, files: Sequence[FileEntry]) -> int:
    """The deepest level no file spans: ``base.buckets``, or shallower while files
    written at a smaller bucket count are live."""
    return min([base_buckets, *(f.node.m for f in files)])


def runs(files: Sequence[FileEntry]) -> tuple[Run, ...]:
    """The sorted runs of one unit's change files, newest first."""
    by_seq: dict[int, list[int]] = {}
    for f in files:
        sizes = by_seq.setdefault(f.seq, [0, 0])
        sizes[f.file_type == "D"] += f.size_bytes
    return tuple(Run(seq, i, d) for seq, (i, d) in sorted(by_seq.items(), reverse=True))


def _by_unit(files: Sequence[FileEntry], level: int) -> UnitFiles:
    grouped: UnitFiles = {}
    for f in files:
        grouped.setdefault(f.node.ancestor_at(level), []).append(f)
    return grouped
