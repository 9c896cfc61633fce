"""``dead-letter`` events on ``firn.dlq``: a message a service could not decode,
validate or trust, parked with the reason so it never blocks its partition and a
human can see what was wrong.

A dead letter never embeds the whole original: a message just under the broker's
size limit, copied and JSON-escaped, would exceed it, the letter could not be
published, and the service would retry it forever (it once stopped the whole
stack). It carries a bounded excerpt of the value and the key, the value's size and
SHA-256, and where to find the original (topic, partition, offset) while the topic
retains it.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field

from firn.events.envelope import Event

EXCERPT_BYTES = 4096
"""How much of the original value a dead letter keeps."""
KEY_BYTES = 512
"""How much of the original key a dead letter keeps."""
REASON_CHARS = 2048
"""How much of the reason (validation messages quote the offending value)."""


def excerpt(data: bytes | str | None, limit: int) -> str | None:
    """At most ``limit`` bytes of ``data`` as text (undecodable bytes replaced, a cut
    character dropped), with a marker when something was cut."""
    if data is None:
        return None
    raw = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    if len(raw) <= limit:
        return raw.decode("utf-8", errors="replace")
    head = raw[:limit].decode("utf-8", errors="ignore")
    return f"{head}... [{len(raw) - limit} more bytes]"


def bounded(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` cut to about ``limit`` characters (for reasons and error messages that
    travel in events)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


class DeadLetterEvent(Event):
    """One refused message and why."""

    event_type: Literal["dead-letter"] = "dead-letter"
    schema_version: Literal[1] = Field(default=1, description="Bumped on incompatible changes.")
    service: str = Field(description="The service that refused it.")
    source_topic: str
    source_partition: int = Field(ge=0)
    source_offset: int = Field(ge=0)
    key: str | None = Field(
        description=f"The message key as text (bytes replaced), at most {KEY_BYTES} bytes."
    )
    reason: str = Field(
        description="What was wrong, e.g. the first schema violation "
        f"(at most {REASON_CHARS} characters)."
    )
    payload: str = Field(
        description=f"The first {EXCERPT_BYTES} bytes of the message value as text "
        "(bytes replaced), with a marker when cut."
    )
    payload_bytes: int = Field(ge=0, description="Size of the original value in bytes.")
    payload_sha256: str = Field(
        pattern="^[0-9a-f]{64}$", description="SHA-256 of the original value (hex)."
    )

    @classmethod
    def of(
        cls,
        *,
        service: str,
        source: tuple[str, int, int],
        key: bytes | str | None,
        value: bytes | None,
        reason: str,
    ) -> DeadLetterEvent:
        """The dead letter for a message at ``source`` (topic, partition, offset),
        bounded whatever the size of the original."""
        topic, partition, offset = source
        raw = value or b""
        return cls(
            service=service,
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            key=excerpt(key, KEY_BYTES),
            reason=bounded(reason),
            payload=excerpt(raw, EXCERPT_BYTES) or "",
            payload_bytes=len(raw),
            payload_sha256=hashlib.sha256(raw).hexdigest(),
        )

    def headers(self) -> list[tuple[str, str | bytes | None]]:
        """Kafka headers that say the same in brief, for tools that read only those."""
        return [
            ("firn.reason", bounded(self.reason, 256).encode()),
            ("firn.service", self.service.encode()),
            (
                "firn.source",
                f"{self.source_topic}[{self.source_partition}]@{self.source_offset}".encode(),
            ),
        ]
