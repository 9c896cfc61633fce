"""``compaction`` events on ``firn.compactions`` (committer -> metrics): a plan was
committed. Metrics resets the partition's counters from it (and, as for commits,
the catalog stays the truth: its periodic check corrects anything missed)."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from firn.events.envelope import Event


class CompactionEvent(Event):
    """A compaction plan committed: a new snapshot of one partition."""

    event_type: Literal["compaction"] = "compaction"
    schema_version: Literal[1] = Field(default=1, description="Bumped on incompatible changes.")
    table: str = Field(description="Table name.")
    table_id: int = Field(ge=1)
    partition_key: str
    plan_id: int = Field(ge=1)
    kind: Literal["major", "minor", "full", "bin-pack"]
    snapshot_id: int = Field(ge=1, description="The snapshot the compaction created.")
    max_merged_seq: int = Field(ge=0, description="The partition's max_merged_seq after it.")
    removed_files: int = Field(ge=0)
    added_files: int = Field(ge=0)
    added_bytes: int = Field(ge=0)
    added_rows: int = Field(ge=0)
    committed_at: AwareDatetime
