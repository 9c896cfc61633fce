"""The envelope every Firn event shares (STYLE 2): frozen, versioned, typed.

``event_type`` is the discriminator a consumer dispatches on; ``schema_version`` lets
a consumer refuse what it does not understand instead of misreading it; ``event_id``
lets handlers and humans recognise a redelivered event.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Protocol

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from firn.model.commits import Delivery


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Event(BaseModel):
    """Fields common to every event; subclasses add ``event_type`` and their payload."""

    # On the wire every field is present (defaults apply only when building in Python),
    # so the published schema requires them all.
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    event_id: uuid.UUID = Field(
        default_factory=uuid.uuid4, description="Unique per event; the same on redelivery."
    )
    produced_at: AwareDatetime = Field(
        default_factory=_now, description="When the producer built the event (UTC)."
    )

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()


class EventSink(Protocol):
    """Where a layer below the API hands its events (the catalog its commit events):
    ``firn.kafka.publisher.EventPublisher`` on a stack, wired in by ``firn.connect``,
    so the catalog never imports a Kafka client."""

    def send(self, key: str, event: Event) -> Delivery:
        """Send ``event`` keyed by ``key`` without waiting for it to be acknowledged."""
        ...

    def close(self) -> None: ...
