"""Planning one partition the tiered way (issue 15), as the services do.

The policy per unit is ``firn.model.tiering``; this module cuts the partition into
units, asks the policy, and turns its answers into one plan:

- a unit that folds gets the fold tasks ``firn.engine.planner`` makes for a major
  compaction, over that unit's files only (incremental merge and key-range splits
  included), so other units' base files are not rewritten;
- a unit that merges gets one ``minor`` task over the files of its newest runs,
  written back as one run at the unit's node.

A ``major`` request (the partition's SPEC 4 major rules fired) folds every unit with
changes when no unit is due on its own numbers, so a partition-level reason such as
``major.interval-max`` is always answered. When the partition's small base files pass
the small-file rule (folds leave untouched base files as they are, so small ones add
up), each unit coalesces its windows of neighbouring small files
(``firn.model.tiering.coalesce_windows``), changes or not: inside the unit's fold
when it folds, else in a task of their own. A unit with no such window but twice the
rule's count of small files is rewritten whole. A ``minor`` request plans only what
the units call for, possibly nothing.

The committer removes exactly the inputs of each task; the partition's
``max_merged_seq`` moves to S only when no change file at or below S is left, which a
plan that folds some units and not others does not do.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace

from firn.engine.planner import KeyRanges, fold_tasks, plan_partition
from firn.model.files import FileEntry
from firn.model.plans import PlanDraft, PlannedTask
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
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


def plan_tiered(
    table: TableSchema,
    properties: TableProperties,
    partition_key: str,
    max_merged_seq: int,
    files: Sequence[FileEntry],
    kind: Kind = "major",
    now: dt.datetime | None = None,
    schema_budget: int = 0,
) -> PlanDraft | None:
    """The tiered plan for one partition, or ``None`` when no unit needs work. Full
    compactions and tables without a key plan as ``plan_partition`` does. Outside
    the table's ``compaction.major-window`` (at ``now``, default the current time) a
    unit folds only when its runs have reached ``write.stall-runs``; others merge
    runs if they are due to. A major plan also rewrites base files of older schema
    versions worth up to ``schema_budget`` bytes (``firn.model.tiering.schema_step``)."""
    if kind not in ("major", "minor", "full") or not table.keyed:
        return plan_partition(table, properties, partition_key, max_merged_seq, files, kind)
    mine = [f for f in files if f.partition_key == partition_key]
    changes = [f for f in mine if f.store == "change" and f.seq > max_merged_seq]
    base = [f for f in mine if f.store == "base"]
    properties = laid_out(properties, base, changes)
    level = unit_level(properties.base_buckets, (*changes, *base))
    unit_changes = _by_unit(changes, level)
    unit_base = _by_unit(base, level)
    rebucketed = _rebucket_step(unit_changes, unit_base, properties) if kind == "full" else []
    for node in rebucketed:
        unit_changes.setdefault(node, [])
    window = properties.window
    off_peak = window is not None and not window.contains(now or dt.datetime.now(dt.UTC))
    ranges = KeyRanges(table.key_schema)
    coalesced = (
        {} if kind != "major" or off_peak else _coalesced(ranges, unit_base, level, properties)
    )
    if kind == "major" and not off_peak and level == properties.base_buckets:
        # Base files of older schema versions: the step ``schema_budget`` pays for.
        step = schema_step(base, table.schema_id, schema_budget)
        for node, old in _by_unit(step, level).items():
            together = coalesced.setdefault(node, [])
            together += [f for f in old if f not in together]
    if not unit_changes and not coalesced:
        return None
    nodes = max(1, properties.base_buckets // level)
    # What folding each unit would do: the tasks, and the base files they leave
    # untouched (no change meets their key range). A fold costs the base it rewrites,
    # so that, not the whole base, is what the unit's runs are weighed against: keys
    # that arrive in order fold as they come, without rewriting older base, and base
    # files a deletion vector will cover do not count either.
    folds = {
        node: fold_tasks(table, properties, files_of_unit, unit_base.get(node, []))
        for node, files_of_unit in unit_changes.items()
    }
    decided: dict[Node, UnitPlan] = {}
    for node, files_of_unit in unit_changes.items():
        rewritten = sum(_rewritten_bytes(t, properties, ranges) for t in folds[node][0])
        unit = Unit(runs(files_of_unit), rewritten, nodes)
        if (plan := plan_unit(unit, properties)) is not None:
            decided[node] = plan
    if kind == "major" and not any(p.fold for p in decided.values()):
        decided = {node: UnitPlan(True, 0, ("the partition is due",)) for node in unit_changes}
    for node in rebucketed:
        reason = f"re-bucketing to base.buckets {properties.base_buckets}"
        decided[node] = UnitPlan(True, 0, (reason,))
    if off_peak:
        decided = _off_peak(decided, unit_changes, properties)
    tasks: list[PlannedTask] = []
    untouched: list[FileEntry] = []
    for node, plan in sorted(decided.items()):
        if node in rebucketed and plan.fold:
            moved, _ = fold_tasks(
                table, properties, unit_changes[node], unit_base.get(node, []), full=True
            )
            tasks += [replace(t, kind="full") for t in moved]
        elif plan.fold:
            folded, kept = folds[node]
            if node in coalesced:
                folded, kept = fold_tasks(
                    table,
                    properties,
                    unit_changes[node],
                    unit_base.get(node, []),
                    coalesce=coalesced[node],
                )
            tasks += [replace(t, kind="major") for t in folded]
            untouched += kept
        else:
            newest = {r.seq for r in runs(unit_changes[node])[: plan.merge]}
            merged = tuple(f for f in unit_changes[node] if f.seq in newest)
            tasks.append(PlannedTask(node, None, None, (), merged, kind="minor"))
    for node, small in sorted(coalesced.items()):
        if node not in decided or not decided[node].fold:
            merged_small, _ = fold_tasks(table, properties, (), small, full=True, coalesce=small)
            tasks += [replace(t, kind="major") for t in merged_small]
    if not tasks:
        return None
    kinds = {t.kind for t in tasks}
    plan_kind: Kind = "full" if "full" in kinds else "major" if "major" in kinds else "minor"
    to_seq = max((f.seq for f in changes), default=max_merged_seq)
    return PlanDraft(
        partition_key, plan_kind, max_merged_seq, to_seq, tuple(tasks), tuple(untouched)
    )


REBUCKET_STEP_TASKS = 4
"""A re-bucketing plan rewrites units until about this many ``task.max-bytes`` worth."""


def _rebucket_step(
    unit_changes: dict[Node, list[FileEntry]],
    unit_base: dict[Node, list[FileEntry]],
    properties: TableProperties,
) -> list[Node]:
    """The units whose base files sit at another level than ``base.buckets`` that the
    next re-bucketing step rewrites whole: in node order, about
    ``REBUCKET_STEP_TASKS * task.max-bytes`` at a time (at least one unit)."""
    step = REBUCKET_STEP_TASKS * properties.task_max_bytes
    chosen: list[Node] = []
    size = 0
    for node, files in sorted(unit_base.items()):
        if all(f.node.m == properties.base_buckets for f in files):
            continue
        if chosen and size >= step:
            break
        chosen.append(node)
        size += sum(f.size_bytes for f in (*files, *unit_changes.get(node, [])))
    return chosen


def _coalesced(
    ranges: KeyRanges,
    unit_base: dict[Node, list[FileEntry]],
    level: int,
    properties: TableProperties,
) -> dict[Node, list[FileEntry]]:
    """When the partition's small base files reach the SPEC 4 small-file rule
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
    chosen: dict[Node, list[FileEntry]] = {}
    for node, files in unit_base.items():
        in_order = sorted(files, key=ranges)
        windows = coalesce_windows([f.size_bytes for f in in_order], threshold)
        if windows:
            chosen[node] = [in_order[i] for w in windows for i in w]
        elif small[node] >= 2 * properties.major_file_count:
            chosen[node] = files
    return chosen


def _off_peak(
    decided: dict[Node, UnitPlan],
    unit_changes: dict[Node, list[FileEntry]],
    properties: TableProperties,
) -> dict[Node, UnitPlan]:
    """Outside the window: folds wait, but for units at the stall limit (reads come
    first); a unit that would have folded merges its runs instead if they are due."""
    stall = properties.write_stall_runs
    kept: dict[Node, UnitPlan] = {}
    for node, plan in decided.items():
        unit_runs = runs(unit_changes[node])
        if not plan.fold or (stall and len(unit_runs) >= stall):
            kept[node] = plan
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


def _by_unit(files: Sequence[FileEntry], level: int) -> dict[Node, list[FileEntry]]:
    grouped: dict[Node, list[FileEntry]] = {}
    for f in files:
        grouped.setdefault(f.node.ancestor_at(level), []).append(f)
    return grouped
