"""A producer commit as data: the change files it wrote and what the catalog
allocated for it (design §3)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Protocol

from firn.model.tree import Node


@dataclass(frozen=True)
class StagedFile:
    """A written data file (a change file, or a base file of a bulk load), ready to be
    registered by the catalog."""

    partition_key: str
    partition_values: dict[str, str]
    file_type: str
    node: Node
    path: str
    """Relative to the table's location."""
    size_bytes: int
    record_count: int
    min_key: list[Any] | None
    max_key: list[Any] | None
    key_spans: list[list[Any]] | None = None
    """Change files: where the keys lie inside the range (``firn.model.keyspans``)."""
    schema_id: int = 0
    """The schema version the file was written under."""


@dataclass(frozen=True)
class CommitResult:
    """What the catalog allocated for one commit."""

    seq: int
    snapshot_id: int
    committed_at: dt.datetime
    busiest: dict[str, tuple[str, int]] | None = None
    """When the commit asked for it: per partition it wrote, its change node with the
    most sorted runs and how many (``busiest_nodes``), as of the commit itself."""


class Delivery(Protocol):
    """What became of a commit's event: asked for only by whoever wants to know (a
    commit does not wait for it)."""

    def delivered(self) -> bool:
        """Whether the event was acknowledged, waiting a bounded time to know."""
        ...


@dataclass(frozen=True)
class StreamBatch:
    """One micro-batch of a streaming writer: committed at most once per table."""

    query_id: str
    """The streaming query's stable id (its checkpoint survives restarts)."""
    batch_id: int


@dataclass(frozen=True)
class Stall:
    """A change node with so many sorted runs that compaction is not keeping up:
    reads of its keys merge ``runs`` files' worth of runs (``write.stall-runs``)."""

    partition_key: str
    node: str
    runs: int
    limit: int


class Committed(int):
    """What ``Table.commit`` returns: the commit's seq (an ``int``, as it always was),
    which also says whether the commit found compaction behind (back-pressure)."""

    stalls: tuple[Stall, ...]
    waited: float
    """Seconds the commit waited for compaction (``stall_wait``)."""
    phases: dict[str, float]
    """Seconds each step of the commit took, in order: ``validate`` (the schema check,
    with ``merge_schema``), ``split`` (hashing rows to partitions and nodes), ``stage``
    (recording the file names, which answers the current schema version), ``write``
    (the change files), ``register`` (the catalog transaction, which also looks at
    the runs per node), ``announce`` (handing the commit event to the Kafka client,
    which sends it without the commit waiting) and ``back_pressure`` (any wait for
    compaction). A step taken again (the schema changed while staging) adds up."""

    def __new__(
        cls,
        seq: int,
        stalls: tuple[Stall, ...] = (),
        waited: float = 0.0,
        phases: dict[str, float] | None = None,
    ) -> Committed:
        committed = super().__new__(cls, seq)
        committed.stalls = stalls
        committed.waited = waited
        committed.phases = phases or {}
        return committed

    @property
    def stalled(self) -> bool:
        """Whether a node of a partition this commit wrote is at ``write.stall-runs``."""
        return bool(self.stalls)
