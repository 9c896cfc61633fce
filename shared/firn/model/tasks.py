"""What a compaction task is, as data that crosses process boundaries.

A ``TaskSpec`` is everything an executor needs to run one task without asking the
catalog: the input files (with the seq the merge rule needs), the target node and key
range, S, the output size and prefix. It is stored with the task row and carried by
plan-task events and into Spark tasks, so it is a frozen model with a JSON form.
Key bounds are keys in their catalog JSON form (``firn.model.values``); the lower bound
is inclusive, the upper exclusive, ``None`` unbounded.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from firn.model.files import FileEntry
from firn.model.tree import Node

Kind = Literal["major", "minor", "full", "bin-pack"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InputFile(_Frozen):
    """One file a task reads."""

    file_id: int
    path: str = Field(description="Relative to the table's location.")
    file_type: str = Field(description="I, D or B.")
    node_m: int
    node_i: int
    seq: int
    size_bytes: int
    record_count: int
    min_key: list[Any] | None = None
    max_key: list[Any] | None = None

    @property
    def node(self) -> Node:
        return Node(self.node_m, self.node_i)

    @classmethod
    def of(cls, entry: FileEntry) -> InputFile:
        return cls(
            file_id=entry.file_id,
            path=entry.path,
            file_type=entry.file_type,
            node_m=entry.node.m,
            node_i=entry.node.i,
            seq=entry.seq,
            size_bytes=entry.size_bytes,
            record_count=entry.record_count,
            min_key=entry.min_key,
            max_key=entry.max_key,
        )


class OutputFile(_Frozen):
    """One file a task wrote, with the stats the catalog registers."""

    path: str = Field(description="Relative to the table's location.")
    file_type: str
    node_m: int
    node_i: int
    seq: int = Field(description="The greatest change seq folded into the file.")
    size_bytes: int
    record_count: int
    min_key: list[Any] | None
    max_key: list[Any] | None


class TaskSpec(_Frozen):
    """One task of a plan: merge these inputs for this node and key range."""

    plan_id: int
    task_id: int
    table_id: int
    location: str = Field(description="The table's storage root.")
    partition_key: str
    kind: Kind
    node_m: int = Field(description="The target node, at the base write level.")
    node_i: int
    lower: list[Any] | None = Field(description="Inclusive lower key bound, or none.")
    upper: list[Any] | None = Field(description="Exclusive upper key bound, or none.")
    base_files: tuple[InputFile, ...]
    change_files: tuple[InputFile, ...]
    cut_before: tuple[list[Any], ...] = Field(
        default=(), description="Keys no output file may span (untouched files start there)."
    )
    from_merged_seq: int = Field(description="Change rows at or below this are merged.")
    to_seq: int = Field(description="S: change rows above this are not this plan's.")
    target_file_size: int
    output_prefix: str = Field(description="Unique per task; the attempt is appended.")

    @property
    def node(self) -> Node:
        return Node(self.node_m, self.node_i)

    @property
    def input_bytes(self) -> int:
        return sum(f.size_bytes for f in (*self.base_files, *self.change_files))

    def output_dir(self, attempt: int) -> str:
        """Where one attempt writes: never shared with another attempt or task."""
        return attempt_dir(self.output_prefix, attempt)


def attempt_dir(output_prefix: str, attempt: int) -> str:
    """The directory attempt ``attempt`` of the task with ``output_prefix`` writes in."""
    return f"{output_prefix}-a{attempt}"


class TaskResult(_Frozen):
    """What one attempt of a task produced."""

    task_id: int
    attempt: int
    outputs: tuple[OutputFile, ...] = ()
    error: str | None = None
    retryable: bool = Field(
        default=True,
        description="Whether another attempt may succeed; False for an input file that "
        "is damaged or does not match the catalog (the plan then fails at once).",
    )
    rows_read: int = 0
    rows_written: int = 0
    seconds: float = 0.0
    spilled_runs: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None
