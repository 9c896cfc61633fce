"""Publishing events with a bounded wait.

A producer commit is durable once the catalog transaction commits; the event after
it only tells metrics sooner. So publishing must never undo the commit and never
block the producer for long: ``publish`` waits at most ``timeout`` seconds for the
broker's acknowledgement and then returns ``False``, leaving the message queued in
the client (librdkafka keeps retrying it in the background until
``message.timeout.ms``). An event that is never delivered is recovered by metrics'
periodic check of the catalog (``metrics.check-interval``), which finds the
commit's files whether or not its event arrived.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from firn.errors import ConfigError
from firn.events.envelope import Event
from firn.events.schemas import validate
from firn.kafka.clients import producer
from firn.settings import FirnSettings

log = logging.getLogger(__name__)

REFUSALS = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError._AUTHENTICATION,
}
"""Delivery errors that say who the client is, not how the network is."""


class EventPublisher:
    """A lazily created idempotent producer for one topic."""

    def __init__(self, settings: FirnSettings, topic: str, *, timeout: float) -> None:
        self._settings = settings
        self.topic = topic
        self.timeout = timeout
        self._producer: Producer | None = None

    def _client(self) -> Producer:
        if self._producer is None:
            self._producer = producer(
                self._settings,
                # The commit waits for its one event's acknowledgement: lingering to
                # batch it with others only delays the commit (5 ms of its 30).
                **{
                    "message.timeout.ms": 120_000,
                    "client.id": "firn-commit-events",
                    "linger.ms": 0,
                },
            )
        return self._producer

    def publish(self, key: str, event: Event) -> bool:
        """Send ``event`` keyed by ``key``; whether the broker acknowledged it in time."""
        payload = event.model_dump(mode="json")
        validate(payload)
        outcome: dict[str, Any] = {}

        def delivered(error: KafkaError | None, _message: Message) -> None:
            outcome["error"] = error

        try:
            client = self._client()
            client.produce(self.topic, key=key, value=event.to_json(), on_delivery=delivered)
        except (BufferError, KafkaException, ConfigError) as exc:
            log.warning("could not queue %s event for %s: %s", self.topic, key, exc)
            return False
        deadline = time.monotonic() + self.timeout
        while "error" not in outcome and (left := deadline - time.monotonic()) > 0:
            client.poll(min(left, 0.1))
        if "error" not in outcome:
            log.warning(
                "%s event for %s not acknowledged within %.1fs; it stays queued, and the "
                "metrics catalog check recovers it if it is never delivered",
                self.topic,
                key,
                self.timeout,
            )
            return False
        error = outcome["error"]
        if error is not None:
            if error.code() in REFUSALS:
                # Not weather: every later event will be refused too, until an admin acts.
                log.error(
                    "Kafka refused the %s event for %s (%s): this process's principal "
                    "(sasl.username %r) may not write %s; the commit itself is durable "
                    "and the metrics catalog check finds it. Grant it with `firn kafka-acls`",
                    self.topic,
                    key,
                    error.name(),
                    self._settings.kafka_config.get("sasl.username"),
                    self.topic,
                )
            else:
                log.warning("%s event for %s was not delivered: %s", self.topic, key, error)
            return False
        return True

    def close(self) -> None:
        """Give queued events a last bounded chance, then drop the client."""
        if self._producer is not None:
            left = self._producer.flush(self.timeout)
            if left:
                log.warning("%d %s event(s) not delivered before close", left, self.topic)
            self._producer = None
