"""``MergeRuns``: a minor compaction of the whole partition (``firn compact --kind
minor``): the unmerged change files of each node that has several are merged into
one insert and one delete file at that node; deletes are kept, the base untouched.
When one is due is the triggers' business (``minor.file-count``)."""

from __future__ import annotations

from firn.engine.policies.policy import PartitionFiles
from firn.model.files import FileEntry
from firn.model.plans import PlanDraft, PlannedTask
from firn.model.tasks import Kind
from firn.model.tree import Node


class MergeRuns:
    def plan(self, partition: PartitionFiles) -> PlanDraft | None:
        by_node: dict[Node, list[FileEntry]] = {}
        for f in partition.changes:
            by_node.setdefault(f.node, []).append(f)
        tasks = tuple(
            PlannedTask(node, None, None, (), tuple(files))
            for node, files in sorted(by_node.items())
            if len(files) > 1
        )
        if not tasks:
            return None
        to_seq = max(f.seq for t in tasks for f in t.change_files)
        return PlanDraft(
            partition.partition_key, Kind.MINOR, partition.max_merged_seq, to_seq, tasks
        )
