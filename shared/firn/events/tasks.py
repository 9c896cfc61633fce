"""``task-result`` events on ``firn.task-results`` (executor-dispatcher -> committer):
one attempt of a task ended. The outputs themselves are in Postgres (recorded before
the event is sent); the event says which plan may now be committable."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from firn.events.envelope import Event


class TaskResultEvent(Event):
    """An attempt ended as Prepared, was retried, failed its plan, or was stale."""

    event_type: Literal["task-result"] = "task-result"
    schema_version: Literal[1] = Field(default=1, description="Bumped on incompatible changes.")
    table: str = Field(description="Table name.")
    table_id: int = Field(ge=1)
    partition_key: str
    plan_id: int = Field(ge=1)
    task_id: int = Field(ge=1)
    attempt: int = Field(ge=1)
    outcome: Literal["prepared", "retry", "failed", "stale"]
    error: str | None = Field(default=None, description="Why the attempt failed.")
    rows_written: int = Field(ge=0)
    seconds: float = Field(ge=0)
