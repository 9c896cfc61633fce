"""The seam every compaction policy stands behind: one partition's files in, one
plan draft (or nothing to do) out.

A policy is a small class with one method, ``plan``. It is pure: it reads nothing
but its ``PartitionFiles`` (no catalog, no clock), so the same files always give the
same plan, and a policy is tested on a list of ``FileEntry``. Which policy answers a
request is the registry's choice (``firn.engine.policies``), after Paimon's
``CompactStrategy.pick`` with its universal, force-up-level-0 and off-peak variants.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from firn.model.files import FileEntry
from firn.model.plans import PlanDraft
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema


@dataclass(frozen=True)
class PartitionFiles:
    """What a policy plans over: one partition of a table at one snapshot."""

    table: TableSchema
    properties: TableProperties
    partition_key: str
    max_merged_seq: int
    files: Sequence[FileEntry]
    """The live files at the snapshot; those of other partitions are ignored."""
    schema_budget: int = 0
    """Bytes of base files of older schema versions a major plan may rewrite into the
    current one (``firn.catalog.schemas.rewrite_budget``)."""
    now: dt.datetime | None = None
    """The instant a time window is judged at (``OffPeak``); None: the current time."""
    off_peak: bool = False
    """Outside the table's ``compaction.major-window``: set by ``OffPeak`` only."""

    @cached_property
    def changes(self) -> list[FileEntry]:
        """The unmerged change files (seq above ``max_merged_seq``)."""
        return [
            f
            for f in self.files
            if f.partition_key == self.partition_key
            and f.store == "change"
            and f.seq > self.max_merged_seq
        ]

    @cached_property
    def base(self) -> list[FileEntry]:
        return [
            f for f in self.files if f.partition_key == self.partition_key and f.store == "base"
        ]

    @property
    def to_seq(self) -> int:
        """S: the greatest unmerged change seq (``max_merged_seq`` when none)."""
        return max((f.seq for f in self.changes), default=self.max_merged_seq)


class CompactionPolicy(Protocol):
    def plan(self, partition: PartitionFiles) -> PlanDraft | None:
        """The plan for ``partition``, or None when this policy finds nothing to do."""
        ...
