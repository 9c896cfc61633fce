"""``commit`` events on ``firn.commits``: a producer committed a change set (SPEC 3).

The catalog is the truth; the event is a prompt. Metrics uses it to update its
per-partition counters at once instead of at its next catalog check, and ignores an
event whose seq is not newer than what it already saw (duplicates, reordering).
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from firn.events.envelope import Event


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
