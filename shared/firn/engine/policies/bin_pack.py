"""``BinPack``: a table without a primary key has no rows to merge, only files to
pack. Every unmerged change file (``max_merged_seq`` moves past them all) and the
small base files (every base file when ``everything``) are concatenated into tasks of
at most ``task.max-bytes``, in commit order."""

from __future__ import annotations

from dataclasses import dataclass

from firn.engine.policies.policy import PartitionFiles
from firn.model.files import FileEntry
from firn.model.plans import PlanDraft, PlannedTask
from firn.model.tasks import Kind
from firn.model.tree import ROOT


@dataclass(frozen=True)
class BinPack:
    everything: bool = False
    """Repack every base file, not only the small ones (a ``full`` request)."""

    def plan(self, partition: PartitionFiles) -> PlanDraft | None:
        properties, changes = partition.properties, partition.changes
        small = [
            f
            for f in partition.base
            if self.everything or f.size_bytes < properties.small_file_threshold
        ]
        if not changes and len(small) < 2:
            return None
        groups: list[list[FileEntry]] = [[]]
        size = 0
        for f in sorted((*changes, *small), key=lambda f: (f.seq, f.file_id)):
            if groups[-1] and size + f.size_bytes > properties.task_max_bytes:
                groups.append([])
                size = 0
            groups[-1].append(f)
            size += f.size_bytes
        tasks = tuple(
            PlannedTask(
                ROOT,
                None,
                None,
                tuple(f for f in group if f.store == "base"),
                tuple(f for f in group if f.store == "change"),
            )
            for group in groups
        )
        return PlanDraft(
            partition.partition_key,
            Kind.BIN_PACK,
            partition.max_merged_seq,
            partition.to_seq,
            tasks,
        )
