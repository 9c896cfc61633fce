"""The metrics service's per-partition counters (design §4): kept up to date from commit
events, reconciled with catalog readings, and turned into plan requests.

Pure: no Kafka, Faust or Postgres here. The service stores one ``TrackedPartition``
per (table, partition) as JSON in its Faust table.

Everything is ordered by the table's snapshot id. A commit event names the snapshot
it created; a catalog reading names the newest snapshot it includes. A reading
replaces the counters, and the increments of commit events newer than the reading
stay on top of it (``recent``), so a reading taken a moment before a commit landed
does not drop that commit. A commit event the counters already include (older than
the last reading, or seen before) changes nothing: duplicated and reordered events
are harmless, and a lost one is made good by the next reading.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from firn.model.properties import TableProperties
from firn.model.triggers import Decision, PartitionMetrics, decide, score

_ZERO = PartitionMetrics(0, 0, 0, 0, 0, 0, 0, None)


@dataclass(frozen=True)
class Increment:
    """What one commit added to the partition."""

    snapshot_id: int
    seq: int
    insert_bytes: int
    delete_bytes: int
    insert_files: int
    delete_files: int
    committed_at: float | None = None
    """Epoch seconds of the commit (None: not known, as in events stored before it)."""


@dataclass(frozen=True)
class Reading:
    """The partition as the catalog had it at ``snapshot_id``."""

    snapshot_id: int
    metrics: PartitionMetrics
    max_seq: int
    max_merged_seq: int
    last_major_at: float | None
    last_plan: int = 0
    """The partition's newest committed compaction plan (0: none)."""
    oldest_change_at: float | None = None
    """Epoch seconds of the oldest unmerged change's commit (None: none)."""


@dataclass(frozen=True)
class Request:
    """A plan request to send: the compaction due, why, and how urgent."""

    kind: str
    max_seq: int
    score: float
    reasons: tuple[str, ...]


@dataclass
class TrackedPartition:
    table: str
    table_id: int
    partition_key: str
    read_snapshot: int = 0
    """Snapshot of the last catalog reading applied; 0 before the first."""
    counted: PartitionMetrics = _ZERO
    """The counters as of that reading."""
    max_seq: int = 0
    max_merged_seq: int = 0
    last_major_at: float | None = None
    recent: list[Increment] = field(default_factory=list)
    """Commits newer than the reading, in the order their events arrived."""
    last_plan: int = 0
    """The newest committed plan any reading showed."""
    requested_at: float | None = None
    """When a plan request was last sent; cleared by a reading that shows a newer
    committed plan."""
    requested_seq: int = 0
    """The partition's newest seq when that request was sent."""
    oldest_change_at: float | None = None
    """When the oldest unmerged change the reading counted was committed."""

    def apply_commit(self, increment: Increment) -> bool:
        """Count a commit; False when it is already counted (or already merged)."""
        if (
            increment.snapshot_id <= self.read_snapshot
            or increment.seq <= self.max_merged_seq
            or any(i.snapshot_id == increment.snapshot_id for i in self.recent)
        ):
            return False
        self.recent.append(increment)
        self.max_seq = max(self.max_seq, increment.seq)
        return True

    def apply_reading(self, reading: Reading) -> bool:
        """Take the catalog's numbers; False for a reading older than the last one.

        A reading that shows a newly committed plan clears the pending request: a
        request the planner skipped because the partition was busy is sent again as
        soon as that work is committed, if the partition is still due.
        """
        if reading.snapshot_id < self.read_snapshot:
            return False
        self.read_snapshot = reading.snapshot_id
        self.counted = dataclasses.replace(
            reading.metrics, seconds_since_major=None, oldest_change_seconds=None
        )
        self.oldest_change_at = reading.oldest_change_at
        self.max_seq = max(self.max_seq, reading.max_seq)
        self.max_merged_seq = max(self.max_merged_seq, reading.max_merged_seq)
        self.last_major_at = reading.last_major_at
        if reading.last_plan > self.last_plan:
            self.last_plan = reading.last_plan
            self.requested_at = None
        self.recent = [
            i
            for i in self.recent
            if i.snapshot_id > reading.snapshot_id and i.seq > self.max_merged_seq
        ]
        return True

    def metrics(self, now: float) -> PartitionMetrics:
        """The counters with the recent commits added, as the triggers read them."""
        m = self.counted
        files = sum(i.insert_files + i.delete_files for i in self.recent)
        # A commit adds at most one sorted run (its seq) to each change node.
        per_node = sum(1 for i in self.recent if i.insert_files or i.delete_files)
        commit_times = [i.committed_at for i in self.recent if i.committed_at is not None]
        if m.unmerged_files and self.oldest_change_at is not None:
            commit_times.append(self.oldest_change_at)
        return PartitionMetrics(
            unmerged_insert_bytes=m.unmerged_insert_bytes
            + sum(i.insert_bytes for i in self.recent),
            unmerged_delete_bytes=m.unmerged_delete_bytes
            + sum(i.delete_bytes for i in self.recent),
            unmerged_files=m.unmerged_files + files,
            base_bytes=m.base_bytes,
            base_files=m.base_files,
            small_files=m.small_files + files,
            max_runs_per_node=m.max_runs_per_node + per_node,
            seconds_since_major=None if self.last_major_at is None else now - self.last_major_at,
            misplaced_base_files=m.misplaced_base_files,
            oldest_change_seconds=now - min(commit_times) if commit_times else None,
        )

    def decision(self, properties: TableProperties, now: float) -> Decision:
        return decide(self.metrics(now), properties)

    def request(
        self, properties: TableProperties, now: float, resend_after: float
    ) -> Request | None:
        """The plan request to send now, if the partition is due and no request is
        pending; marks it sent. A request no longer counts as pending once it is
        ``resend_after`` seconds old (lost, or its plan failed) or ``minor.file-count``
        commits newer than it arrived: the runs counted here are an upper bound (a
        commit is counted as a run in every node), so the planner may have found
        nothing due yet, and it sends no answer; waiting out ``resend_after`` would
        let a busy partition's runs pile up meanwhile."""
        pending = self.requested_at is not None and now - self.requested_at < resend_after
        if pending and self.max_seq - self.requested_seq < properties.minor_file_count:
            return None
        metrics = self.metrics(now)
        decision = decide(metrics, properties)
        if decision.kind is None:
            return None
        self.requested_at = now
        self.requested_seq = self.max_seq
        return Request(
            kind=decision.kind.value,
            max_seq=self.max_seq,
            score=score(metrics, properties),
            reasons=decision.reasons,
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able values, as the Faust table stores them."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> TrackedPartition:
        data = dict(stored)
        counted = dict(data["counted"])
        # Stored before runs were counted (a Faust changelog outlives an upgrade).
        if "max_unmerged_files_per_node" in counted:
            counted["max_runs_per_node"] = counted.pop("max_unmerged_files_per_node")
        data["counted"] = PartitionMetrics(**counted)
        data["recent"] = [Increment(**i) for i in data["recent"]]
        return cls(**data)
