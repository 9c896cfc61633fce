"""Parking what a service cannot handle: one dead-letter desk for the consume loop
(``firn.kafka.loop``) and the metrics service's Faust agents alike.

A parked message becomes a bounded ``dead-letter`` event on the DLQ topic, with its
source and the reason, and is counted by reason kind. Delivering it is the caller's
(the loop waits on its confluent-kafka producer, the agents on Faust's): the desk
builds the letter, logs it, and counts what happened to it. A letter the broker
refuses for good is counted as lost and the message skipped: nothing may stop a
service.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from firn.errors import error_kind
from firn.events.dead_letters import KEY_BYTES, DeadLetterEvent
from firn.events.wire import dead_letter_reason
from firn.sensors import sensors

log = logging.getLogger(__name__)

Source = tuple[str, int, int]
"""Topic, partition and offset of the message parked."""


@dataclass(frozen=True)
class Letter:
    """A dead letter ready to send: its value, headers and (bounded) key."""

    event: DeadLetterEvent
    key: bytes | None

    @property
    def value(self) -> bytes:
        return self.event.to_json()

    @property
    def headers(self) -> list[tuple[str, str | bytes | None]]:
        return self.event.headers()


@dataclass
class DeadLetterDesk:
    service: str
    topic: str
    lost: int = field(default=0)
    """Letters the broker refused for good, so far by this process."""

    def letter(self, source: Source, key: object, value: object, exc: BaseException) -> Letter:
        """The dead letter of a message that failed with ``exc``, logged."""
        event = DeadLetterEvent.of(
            service=self.service,
            source=source,
            key=key if isinstance(key, (bytes, str)) else None,
            value=value if isinstance(value, bytes) else None,
            reason=dead_letter_reason(exc),
        )
        log.warning("parking %s in %s: %s", where(source), self.topic, event.reason)
        return Letter(event, key[:KEY_BYTES] if isinstance(key, bytes) else None)

    def parked(self, exc: BaseException) -> None:
        """The broker has the letter of a message that failed with ``exc``."""
        sensors().dead_letter(self.service, error_kind(exc))

    def refused(self, source: Source, why: object) -> None:
        """The broker refused the letter for good: the message is skipped."""
        self.lost += 1
        sensors().dead_letter_lost(self.service)
        log.error(
            "the dead letter for %s was refused (%s): message skipped; %d skipped so far "
            "by this process",
            where(source),
            why,
            self.lost,
        )


def where(source: Source) -> str:
    topic, partition, offset = source
    return f"{topic}[{partition}]@{offset}"
