"""The consume loop every confluent-kafka service runs.

Delivery is at least once: an offset is committed only after the handler's side
effect is durable (the handler returned) or the message was parked in the dead-letter
topic with its reason. A retryable error leaves the offset where it is and the same
message is handled again after a backoff, so a Postgres hiccup never loses an event.
A message that cannot be decoded, or whose event type has no handler, can never
succeed: it goes to the DLQ as a ``dead-letter`` event (the original value as text,
the reason, where it came from) and the loop carries on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from firn.errors import FirnError
from firn.events.dead_letters import DeadLetterEvent

log = logging.getLogger(__name__)

EventHandler = Callable[[Mapping[str, Any]], None]
"""Handles one decoded event; raises a FirnError (retryable or not) when it cannot."""


_REBALANCED = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError._ASSIGNMENT_LOST,
}
"""Commit errors that mean: this member no longer owns the partition."""


class UnhandledEventError(FirnError):
    """An event that no retry can make succeed: it belongs in the DLQ."""


def decode(value: bytes | None) -> Mapping[str, Any]:
    """The JSON object of a message value, or ``UnhandledEventError``."""
    if value is None:
        raise UnhandledEventError("empty message value")
    try:
        event = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UnhandledEventError(f"not JSON: {exc}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
        raise UnhandledEventError("not an event object with an event_type")
    return event


class ConsumeLoop:
    """Poll, dispatch by ``event_type``, commit; park what cannot be handled."""

    def __init__(
        self,
        consumer: Consumer,
        producer: Producer,
        *,
        topics: list[str],
        handlers: Mapping[str, EventHandler],
        dlq_topic: str,
        service: str,
        on_idle: Callable[[], None] = lambda: None,
        retry_backoff: float = 1.0,
    ) -> None:
        self._consumer = consumer
        self._producer = producer
        self._topics = topics
        self._handlers = handlers
        self._dlq_topic = dlq_topic
        self._service = service
        self._on_idle = on_idle
        self._retry_backoff = retry_backoff
        self.stopping = threading.Event()

    def run(self) -> None:
        self._consumer.subscribe(self._topics)
        try:
            while not self.stopping.is_set():
                message = self._consumer.poll(0.5)
                self._on_idle()
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.fatal():
                        raise FirnError(f"fatal Kafka consumer error: {error}")
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("Kafka consumer error: %s", error)
                    continue
                self._handle(message)
        finally:
            self._producer.flush(10)
            self._consumer.close()

    def _handle(self, message: Message) -> None:
        try:
            event = decode(message.value())
            handler = self._handlers.get(event["event_type"])
            if handler is None:
                raise UnhandledEventError(f"no handler for event type {event['event_type']!r}")
            handler(event)
        except FirnError as exc:
            if exc.retryable:
                topic, partition, offset = _position(message)
                log.warning(
                    "retryable failure on %s[%d]@%d, retrying: %s", topic, partition, offset, exc
                )
                self._consumer.seek(TopicPartition(topic, partition, offset))
                time.sleep(self._retry_backoff)
                return
            self._park(message, str(exc))
        self._commit(message)

    def _commit(self, message: Message) -> None:
        """Commit past ``message``. If the group rebalanced while it was handled, the
        partition may belong to another member now: the commit is refused, the new
        owner handles the message again (handlers are idempotent), and this member
        carries on with what it was given."""
        try:
            self._consumer.commit(message=message, asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() not in _REBALANCED:
                raise
            log.warning(
                "offset of %s[%s]@%s not committed, the group rebalanced: %s",
                message.topic(),
                message.partition(),
                message.offset(),
                error.str(),
            )

    def _park(self, message: Message, reason: str) -> None:
        """Send the message to the DLQ with why, and wait until the broker has it."""
        log.warning(
            "parking %s[%d]@%d in %s: %s",
            message.topic(),
            message.partition(),
            message.offset(),
            self._dlq_topic,
            reason,
        )
        headers = {
            "firn.reason": reason.encode(),
            "firn.service": self._service.encode(),
            "firn.source": f"{message.topic()}[{message.partition()}]@{message.offset()}".encode(),
        }
        topic, partition, offset = _position(message)
        letter = DeadLetterEvent(
            service=self._service,
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            key=_text(message.key()),
            reason=reason,
            payload=_text(message.value()) or "",
        )
        self._producer.produce(
            self._dlq_topic,
            key=message.key(),
            value=letter.to_json(),
            headers=list(headers.items()),
        )
        if self._producer.flush(30) > 0:
            raise FirnError("the DLQ message was not acknowledged", retryable=True)


def _text(value: bytes | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", errors="replace")


def _position(message: Message) -> tuple[str, int, int]:
    """Topic, partition and offset: always set on a message a consumer returned."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise FirnError("a consumed message without a position")
    return topic, partition, offset
