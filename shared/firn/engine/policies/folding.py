"""The tasks that fold change files into base: pure, from a partition's live files.

Every policy that rewrites base (``firn.engine.policies``) builds its tasks here.
Given the change files to fold, the base files they may meet and the table's
properties, ``fold_tasks`` decides which files each task rewrites:

1. The inputs are the unmerged change files (seq > max_merged_seq) and the base
   files; ``S`` is the greatest unmerged change seq.
2. Every file is projected onto the write level ``m_b = base.buckets``: a deeper node
   maps to its ancestor, a shallower one to each of its descendants (the task keeps
   only the rows of its node).
3. One task per target node that has unmerged change rows. A base file shallower than
   the write level is always rewritten whole (it is re-bucketed), so every target
   node under it gets a task too: the completeness rule, to a fixed point.
4. Inside a target node, base files whose key range meets no change file's key range
   stay untouched (incremental merge). Overlapping key ranges are joined by a sweep
   over ranges sorted by their lower key, which is union-find for intervals. Outputs
   are cut before each untouched file of the node, so no output spans one.
5. A node whose input passes ``task.max-bytes`` splits into tasks over disjoint key
   ranges, cut only between groups of overlapping base files, so a base file is
   read by exactly one task; a range task lists only the change files whose key
   range meets its own.

``full`` rewrites every base file. Which files are handed in, and when, is the
policies' choice.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from firn.errors import ConfigError
from firn.model.files import FileEntry
from firn.model.plans import PlannedTask
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.model.tree import Node
from firn.model.values import KeyTuple, key_from_json


def fold_tasks(
    table: TableSchema,
    properties: TableProperties,
    changes: Sequence[FileEntry],
    base: Sequence[FileEntry],
    *,
    full: bool = False,
    coalesce: Collection[FileEntry] = (),
) -> tuple[list[PlannedTask], list[FileEntry]]:
    """The tasks that fold ``changes`` into ``base`` (steps 2 to 5 of the module doc),
    and the base files they leave untouched. Base files in ``coalesce`` (small files
    merged together, ``firn.engine.policies.tiered_runs``) are rewritten whatever the changes touch,
    and their tasks may not keep them with a deletion vector (``PlannedTask.rewrite``)."""
    level = properties.base_buckets
    targets = _targets(level, changes, base, full=full)
    forced = {f.file_id for f in coalesce}
    ranges = KeyRanges(table.key_schema)
    # One pass files -> target nodes (projections are cached per distinct node).
    node_changes: dict[Node, list[FileEntry]] = {n: [] for n in targets}
    node_base: dict[Node, list[FileEntry]] = {n: [] for n in targets}
    for by_node, group in ((node_changes, changes), (node_base, base)):
        for f in group:
            for n in _projection(f.node, level):
                if n in by_node:
                    by_node[n].append(f)
    tasks: list[PlannedTask] = []
    untouched: list[FileEntry] = []
    for node in sorted(targets):
        kept: list[FileEntry] = []
        changed = node_changes[node]
        moved = [] if full else movable(ranges, properties, node, changed, node_base[node])
        if moved:
            changed = [f for f in changed if f not in moved]
        if full or not node_changes[node]:
            rewritten = node_base[node]
        else:  # with every change moved, only shallower base files are rewritten
            rewritten, kept = _incremental(ranges, level, changed, node_base[node])
        if forced:
            rewritten += [f for f in kept if f.file_id in forced]
            kept = [f for f in kept if f.file_id not in forced]
        untouched.extend(kept)
        # Outputs are cut before each file that stays: untouched base and moved files.
        cuts = tuple(
            f.min_key
            for f in sorted((*kept, *moved), key=lambda f: ranges(f)[0])
            if f.node.m == level and f.min_key is not None
        )
        if changed or rewritten:
            for task in _split(ranges, properties, node, level, changed, rewritten):
                rewrite = tuple(sorted(f.file_id for f in task.base_files if f.file_id in forced))
                tasks.append(replace(task, cut_before=cuts, rewrite=rewrite))
        tasks += [PlannedTask(node, None, None, (), (f,), move=True) for f in moved]
    return tasks, untouched


def movable(
    ranges: KeyRanges,
    properties: TableProperties,
    node: Node,
    changes: Sequence[FileEntry],
    base: Sequence[FileEntry],
) -> list[FileEntry]:
    """The change files a fold of ``node`` can move into base by metadata alone
    (RocksDB's trivial move, Paimon's upgrade): insert files at the node itself, not
    small (a small file moved would only be rewritten by the small-file rule), whose
    key range overlaps no other change file of the fold and no base file of the node.
    Such a file's rows are the only rows of their keys, so it already is what a merge
    would write, provided its keys are unique and in order: the kernel checks that
    before moving (a producer's file may repeat a key) and merges otherwise."""
    threshold = properties.small_file_threshold
    candidates = [
        f for f in changes if f.file_type == "I" and f.node == node and f.size_bytes >= threshold
    ]
    if not candidates:
        return []
    others = [*changes, *base]
    found = []
    for f in candidates:
        lo, hi = ranges(f)
        if not any(g is not f and lo <= ranges(g)[1] and ranges(g)[0] <= hi for g in others):
            found.append(f)
    return found


@functools.lru_cache(maxsize=4096)
def _projection(node: Node, level: int) -> tuple[Node, ...]:
    return tuple(node.project(level))


class KeyRanges:
    """Each file's key range as comparable tuples, decoded once per plan."""

    def __init__(self, key_schema: pa.Schema) -> None:
        self.key_schema = key_schema
        self._decoded: dict[int, tuple[KeyTuple, KeyTuple]] = {}
        self._spans: dict[int, list[tuple[KeyTuple, KeyTuple, int]]] = {}

    def __call__(self, f: FileEntry) -> tuple[KeyTuple, KeyTuple]:
        decoded = self._decoded.get(f.file_id)
        if decoded is None:
            if f.min_key is None or f.max_key is None:
                raise ConfigError(f"file {f.path} of a keyed table has no key range in the catalog")
            decoded = (
                key_from_json(f.min_key, self.key_schema),
                key_from_json(f.max_key, self.key_schema),
            )
            self._decoded[f.file_id] = decoded
        return decoded

    def spans(self, f: FileEntry) -> list[tuple[KeyTuple, KeyTuple, int]]:
        """Where ``f``'s keys lie, and how many rows in each place: its recorded key
        spans (``firn.model.keyspans``), else its whole range with all its rows."""
        decoded = self._spans.get(f.file_id)
        if decoded is None:
            if f.key_spans:
                decoded = [
                    (
                        key_from_json(lo, self.key_schema),
                        key_from_json(hi, self.key_schema),
                        int(rows),
                    )
                    for lo, hi, rows in f.key_spans
                ]
            else:
                decoded = [(*self(f), f.record_count)]
            self._spans[f.file_id] = decoded
        return decoded

    def rows_meeting(self, changes: Sequence[FileEntry], f: FileEntry) -> int:
        """How many rows of ``changes`` may have a key in ``f``'s range: those of
        their spans that meet it."""
        lo, hi = self(f)
        return sum(
            rows for c in changes for s_lo, s_hi, rows in self.spans(c) if s_lo <= hi and lo <= s_hi
        )


def _targets(
    level: int, changes: Sequence[FileEntry], base: Sequence[FileEntry], *, full: bool
) -> set[Node]:
    """Target nodes: those with changes (or any file, for full), closed under the
    completeness rule for base files shallower than the write level."""
    targets = {n for node in {f.node for f in changes} for n in _projection(node, level)}
    if full:
        targets |= {n for node in {f.node for f in base} for n in _projection(node, level)}
    shallow = list({_projection(f.node, level) for f in base if f.node.m < level})
    grown = True
    while grown:
        grown = False
        for projected in shallow:
            if targets.intersection(projected) and not targets.issuperset(projected):
                targets.update(projected)
                grown = True
    return targets


def _incremental(
    ranges: KeyRanges,
    level: int,
    changes: Sequence[FileEntry],
    base: Sequence[FileEntry],
) -> tuple[list[FileEntry], list[FileEntry]]:
    """Split a node's base files into (rewritten, untouched) by key-range overlap with
    its change files (their key spans, where recorded: an event log's commit meets the
    few files its late updates fall in, not every file its range spans). Shallower
    base files are always rewritten (see module doc)."""
    ranged = [(lo, hi, f) for f in changes for lo, hi, _ in ranges.spans(f)]
    ranged += [(*ranges(f), f) for f in base]
    ranged.sort(key=lambda r: r[0])
    rewritten: list[FileEntry] = []
    kept: list[FileEntry] = []
    group: list[FileEntry] = []
    group_hi: KeyTuple | None = None

    def close(members: list[FileEntry]) -> None:
        touched = any(f.store == "change" for f in members)
        for f in members:
            if f.store == "base":
                (rewritten if touched or f.node.m < level else kept).append(f)

    for lo, hi, f in ranged:
        if group and group_hi is not None and lo > group_hi:
            close(group)
            group, group_hi = [], None
        group.append(f)
        group_hi = hi if group_hi is None or hi > group_hi else group_hi
    close(group)
    return rewritten, kept


def _split(
    ranges: KeyRanges,
    properties: TableProperties,
    node: Node,
    level: int,
    changes: Sequence[FileEntry],
    base: Sequence[FileEntry],
) -> list[PlannedTask]:
    """One task for the node, or several over disjoint key ranges when its input is
    larger than ``task.max-bytes``; each range task reads every change file."""
    change_bytes = sum(_share(f, level) for f in changes)
    base_bytes = sum(f.size_bytes for f in base)
    whole = PlannedTask(node, None, None, tuple(base), tuple(changes))
    if change_bytes + base_bytes <= properties.task_max_bytes or len(base) < 2:
        return [whole]
    blocks = _blocks(ranges, base)
    if len(blocks) < 2:
        return [whole]
    # A range task reads its base files and, roughly, the matching share of changes.
    scale = 1.0 + change_bytes / max(base_bytes, 1)
    groups: list[list[FileEntry]] = [[]]
    cost = 0.0
    for block in blocks:
        block_cost = scale * sum(f.size_bytes for f in block)
        if groups[-1] and cost + block_cost > properties.task_max_bytes:
            groups.append([])
            cost = 0.0
        groups[-1].extend(block)
        cost += block_cost
    # Blocks come in key order, so a group's first file has its smallest key.
    lowers: list[list[Any] | None] = [None, *(g[0].min_key for g in groups[1:])]
    uppers = [*lowers[1:], None]
    # Task k holds the keys in [lower_k, lower_k+1); a change file spanning keys a..b
    # meets the tasks from the one holding a to the one holding b.
    bounds = [key_from_json(lo, ranges.key_schema) for lo in lowers[1:] if lo is not None]
    readers: list[list[FileEntry]] = [[] for _ in groups]
    for f in changes:
        lo_key, hi_key = ranges(f)
        first, last = bisect.bisect_right(bounds, lo_key), bisect.bisect_right(bounds, hi_key)
        for k in range(first, last + 1):
            readers[k].append(f)
    return [
        PlannedTask(node, lo, hi, tuple(g), tuple(r))
        for g, lo, hi, r in zip(groups, lowers, uppers, readers, strict=True)
    ]


def _share(f: FileEntry, level: int) -> float:
    """The bytes of a change file that belong to one node of ``level``."""
    return f.size_bytes / max(1, level // f.node.m)


def _blocks(ranges: KeyRanges, base: Sequence[FileEntry]) -> list[list[FileEntry]]:
    """Base files in key order, grouped where their ranges overlap."""
    ranged = sorted(((*ranges(f), f) for f in base), key=lambda r: r[0])
    blocks: list[list[FileEntry]] = []
    hi: KeyTuple | None = None
    for lo, f_hi, f in ranged:
        if blocks and hi is not None and lo <= hi:
            blocks[-1].append(f)
            hi = max(hi, f_hi)
        else:
            blocks.append([f])
            hi = f_hi
    return blocks
