"""``plan-request`` events on ``firn.plan-requests`` (metrics -> planner) and
``plan-task`` events on ``firn.plan-tasks`` (planner -> executor-dispatcher).

Both are keyed by ``table/partition`` so one partition's events stay in order. A
plan-task event names its task and attempt only; the executor reads the task's spec
from Postgres when it claims it, which is also where it learns that an event is
stale (the task moved on, or its plan was replaced).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from firn.events.envelope import Event


def _scope_may_be_left_out(schema: dict[str, Any]) -> None:
    # Every other field is always written; ``scope`` came later (version 1 still),
    # so requests from producers that predate it stay valid and mean "due".
    schema["required"] = [name for name in schema.get("required", []) if name != "scope"]


class PlanRequestEvent(Event):
    """A partition needs compaction (the triggers of design §4 fired)."""

    model_config = ConfigDict(json_schema_extra=_scope_may_be_left_out)

    event_type: Literal["plan-request"] = "plan-request"
    schema_version: Literal[1] = Field(default=1, description="Bumped on incompatible changes.")
    table: str = Field(description="Table name.")
    table_id: int = Field(ge=1)
    partition_key: str = Field(description="Hive-style path, '' when unpartitioned.")
    kind: Literal["major", "minor", "full"] = Field(description="The compaction due.")
    max_seq: int = Field(ge=0, description="The partition's greatest change seq seen.")
    score: float = Field(ge=0, description="Compaction score: higher is served first.")
    reasons: list[str] = Field(description="The trigger rules that fired, with numbers.")
    scope: Literal["due", "all"] = Field(
        default="due",
        description=(
            "'due': each unit of the partition folds, merges sorted runs or is left alone "
            "on its own numbers (a major request folds every unit when none is due); "
            "'all': the kind applies to the whole partition (a manual request)."
        ),
    )


class PlanTaskEvent(Event):
    """A task is ready to run (Pending)."""

    event_type: Literal["plan-task"] = "plan-task"
    schema_version: Literal[1] = Field(default=1, description="Bumped on incompatible changes.")
    table: str = Field(description="Table name.")
    table_id: int = Field(ge=1)
    partition_key: str
    plan_id: int = Field(ge=1)
    task_id: int = Field(ge=1)
    attempt: int = Field(ge=0, description="Attempts made so far; the claim makes the next.")
    input_bytes: int = Field(ge=0, description="Bytes the task reads, for batching.")
