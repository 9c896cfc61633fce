"""A compaction plan as data: the planner's draft (design §5) before it is stored, and
what storing it gave (a plan with task ids, or why none was made)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from firn.model.files import DEFAULT_CODEC, FileEntry
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, Kind, TaskSpec
from firn.model.tree import Node


@dataclass(frozen=True)
class PlannedTask:
    """One task before it has an id."""

    node: Node
    lower: list[Any] | None
    upper: list[Any] | None
    base_files: tuple[FileEntry, ...]
    change_files: tuple[FileEntry, ...]
    cut_before: tuple[list[Any], ...] = ()
    """Keys an output file must not span: the smallest keys of the node's untouched
    base files, so outputs and untouched files stay disjoint in key range."""
    kind: Kind | None = None
    """What this task does when it differs from its plan: a tiered plan folds some
    units (``major``) and merges the runs of others (``minor``)."""
    move: bool = False
    """The change files become base files as they are (``TaskSpec.move``)."""
    rewrite: tuple[int, ...] = ()
    """Base files (ids) the task rewrites, never keeps: small files coalesced
    (``TaskSpec.rewrite``)."""

    @property
    def input_bytes(self) -> int:
        return sum(f.size_bytes for f in (*self.base_files, *self.change_files))


@dataclass(frozen=True)
class PlanDraft:
    """What one partition's compaction will do."""

    partition_key: str
    kind: Kind
    from_merged_seq: int
    to_seq: int
    tasks: tuple[PlannedTask, ...]
    untouched_base_files: tuple[FileEntry, ...] = field(default=())
    """Base files of planned nodes that no change touches: left as they are."""

    @property
    def input_bytes(self) -> int:
        return sum(t.input_bytes for t in self.tasks)

    def task_spec(
        self,
        task: PlannedTask,
        *,
        plan_id: int,
        task_id: int,
        table_id: int,
        location: str,
        target_file_size: int,
        vector_ratio: float = 0.0,
        small_file_bytes: int = 0,
        vertical_group: int = 0,
        compression: str = DEFAULT_CODEC,
        definition: TableSchema | None = None,
    ) -> TaskSpec:
        """What an executor needs to run ``task``, once plan and task have ids;
        ``definition``: the table at the plan's snapshot (its schema version)."""
        kind = task.kind or self.kind
        inputs = (*task.base_files, *task.change_files)
        table = None
        if definition is not None:
            table = definition.to_dict(versions={f.schema_id for f in inputs})
        store = "change" if kind == "minor" else "base"
        prefix = f"{store}/{self.partition_key}/" if self.partition_key else f"{store}/"
        return TaskSpec(
            plan_id=plan_id,
            task_id=task_id,
            table_id=table_id,
            location=location,
            partition_key=self.partition_key,
            kind=kind,
            node_m=task.node.m,
            node_i=task.node.i,
            lower=task.lower,
            upper=task.upper,
            base_files=tuple(InputFile.of(f) for f in task.base_files),
            change_files=tuple(InputFile.of(f) for f in task.change_files),
            cut_before=task.cut_before,
            from_merged_seq=self.from_merged_seq,
            to_seq=self.to_seq,
            target_file_size=target_file_size,
            output_prefix=f"{prefix}p{plan_id}-t{task_id}",
            move=task.move,
            # A full compaction rewrites every base file (design §4); only folds keep some.
            vector_ratio=vector_ratio if kind == "major" else 0.0,
            small_file_bytes=small_file_bytes,
            vertical_group=vertical_group if kind == "major" else 0,
            compression=compression,
            rewrite=task.rewrite,
            table=table,
        )


@dataclass(frozen=True)
class PlanRecord:
    """A persisted plan and its tasks."""

    plan_id: int
    tasks: tuple[TaskSpec, ...]


@dataclass(frozen=True)
class PlanSkipped:
    """Why no plan was made (the state check of design §5 step 1)."""

    partition_key: str
    reason: str
    queued: bool = False
    """The partition's plan of the same kind waits to run; newer changes follow it."""
