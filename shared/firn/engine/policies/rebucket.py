"""``Rebucket``: the services' answer to a ``full`` trigger, base files at another
level than ``base.buckets`` (the bucket count changed). A step at a time: the units
holding such files are rewritten whole at the new level, about
``REBUCKET_STEP_TASKS * task.max-bytes`` per plan, in node order; the other units get
what ``TieredRuns`` finds due for them (a minor request), so re-bucketing a large
table never stops its compaction."""

from __future__ import annotations

from dataclasses import dataclass

from firn.engine.policies.tiered_runs import TieredRuns, UnitFiles
from firn.model.properties import TableProperties
from firn.model.tasks import Kind
from firn.model.tree import Node

REBUCKET_STEP_TASKS = 4
"""A re-bucketing plan rewrites units until about this many ``task.max-bytes`` worth."""


@dataclass(frozen=True)
class Rebucket(TieredRuns):
    kind: Kind = Kind.FULL

    def rebucketed(
        self, unit_changes: UnitFiles, unit_base: UnitFiles, properties: TableProperties
    ) -> list[Node]:
        """The units whose base files sit at another level than ``base.buckets`` that
        this step rewrites whole: in node order, about ``REBUCKET_STEP_TASKS *
        task.max-bytes`` at a time (at least one unit)."""
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
