"""``commit`` events on ``firn.commits``: a producer committed a change set (design §3).

The catalog is the truth; the event is a prompt. Metrics uses it to update its
per-partition counters at once instead of at its next catalog check, and ignores an
event whose seq is not newer than what it already saw (duplicates, reordering).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from firn.events.envelope import Event
from firn.model.commits import CommitResult, StagedFile


class PartitionChange(BaseModel):
    """What one commit added to one partition."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition_key: str = Field(description="Hive-style path, '' when unpartitioned.")
    partition_values: dict[str, str] = Field(description="Partition column -> value text.")
    insert_files: int = Field(ge=0)
    delete_files: int = Field(ge=0)
    insert_rows: int = Field(ge=0)
    delete_rows: int = Field(ge=0)
    insert_bytes: int = Field(ge=0)
    delete_bytes: int = Field(ge=0)


class CommitEvent(Event):
    """A change set committed to a table."""

    event_type: Literal["commit"] = "commit"
    schema_version: Literal[1] = Field(default=1, description="Bumped on incompatible changes.")
    table: str = Field(description="Table name.")
    table_id: int = Field(ge=1)
    seq: int = Field(ge=1, description="The commit's seq: the table's commit order.")
    snapshot_id: int = Field(ge=1, description="The snapshot the commit created.")
    committed_at: AwareDatetime = Field(description="Catalog time of the commit.")
    partitions: list[PartitionChange] = Field(min_length=1)


def commit_event(
    table: str, table_id: int, result: CommitResult, staged: Sequence[StagedFile]
) -> CommitEvent:
    """The event announcing a landed commit of ``staged`` files."""
    by_partition: dict[str, list[StagedFile]] = {}
    for f in staged:
        by_partition.setdefault(f.partition_key, []).append(f)
    return CommitEvent(
        table=table,
        table_id=table_id,
        seq=result.seq,
        snapshot_id=result.snapshot_id,
        committed_at=result.committed_at,
        partitions=[_partition_change(key, files) for key, files in sorted(by_partition.items())],
    )


def _partition_change(key: str, files: Sequence[StagedFile]) -> PartitionChange:
    inserts = [f for f in files if f.file_type == "I"]
    deletes = [f for f in files if f.file_type == "D"]
    return PartitionChange(
        partition_key=key,
        partition_values=files[0].partition_values,
        insert_files=len(inserts),
        delete_files=len(deletes),
        insert_rows=sum(f.record_count for f in inserts),
        delete_rows=sum(f.record_count for f in deletes),
        insert_bytes=sum(f.size_bytes for f in inserts),
        delete_bytes=sum(f.size_bytes for f in deletes),
    )
