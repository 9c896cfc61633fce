"""``dead-letter`` events on ``firn.dlq``: a message a service could not decode or
validate, kept whole with the reason, so it never blocks its partition and a human
can see what was wrong."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from firn.events.envelope import Event


class DeadLetterEvent(Event):
    """One refused message and why."""

    event_type: Literal["dead-letter"] = "dead-letter"
    schema_version: Literal[1] = Field(default=1, description="Bumped on incompatible changes.")
    service: str = Field(description="The service that refused it.")
    source_topic: str
    source_partition: int = Field(ge=0)
    source_offset: int = Field(ge=0)
    key: str | None = Field(description="The message key, as text (bytes replaced).")
    reason: str = Field(description="What was wrong, e.g. the first schema violation.")
    payload: str = Field(description="The message value, as text (bytes replaced).")
