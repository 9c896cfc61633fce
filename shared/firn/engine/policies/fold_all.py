"""``FoldAll``: fold every unmerged change of the partition into its base at once
(``firn compact --kind major`` and ``firn.compact``), or rewrite the whole base
(``full``). What the tasks are is ``firn.engine.policies.folding``'s business."""

from __future__ import annotations

from dataclasses import dataclass

from firn.engine.policies.folding import fold_tasks
from firn.engine.policies.policy import PartitionFiles
from firn.model.plans import PlanDraft
from firn.model.tasks import Kind
from firn.model.tiering import laid_out


@dataclass(frozen=True)
class FoldAll:
    full: bool = False
    """Rewrite every base file, changed or not (and re-bucket them)."""

    def plan(self, partition: PartitionFiles) -> PlanDraft | None:
        changes, base = partition.changes, partition.base
        if not changes and (not self.full or not base):
            return None
        properties = laid_out(partition.properties, base, changes)
        tasks, untouched = fold_tasks(partition.table, properties, changes, base, full=self.full)
        return PlanDraft(
            partition.partition_key,
            Kind.FULL if self.full else Kind.MAJOR,
            partition.max_merged_seq,
            partition.to_seq,
            tuple(tasks),
            tuple(untouched),
        )
