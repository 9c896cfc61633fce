"""Publishing events without waiting for them.

A producer commit is durable once the catalog transaction commits; the event after
it only tells metrics sooner. So publishing must never undo the commit and never
hold the producer up: ``send`` queues the event in the client and returns a
``PendingDelivery`` at once (librdkafka sends it straight away and keeps retrying it in the
background until ``message.timeout.ms``). Whoever wants to know asks the delivery,
which waits at most ``timeout`` seconds for the broker's acknowledgement; a failed
delivery is logged either way. An event that is never delivered is recovered by
metrics' periodic check of the catalog (``metrics.check-interval``), which finds the
commit's files whether or not its event arrived. Queued events get a bounded last
chance at ``close`` and at interpreter exit.

A commit waited for its event's acknowledgement until issue 37's fleet runs showed
it: 3 ms of a 15 ms commit on an idle stack, and a commit's p50 of 68 ms waited
7.5 ms for it under load, none of it work the commit needs.
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref

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
        _OPEN.add(self)

    def _client(self) -> Producer:
        if self._producer is None:
            self._producer = producer(
                self._settings,
                # One event at a time, sent at once: lingering to batch it with others
                # only delays the services' reaction to the commit.
                **{
                    "message.timeout.ms": 120_000,
                    "client.id": "firn-commit-events",
                    "linger.ms": 0,
                },
            )
        return self._producer

    def send(self, key: str, event: Event) -> PendingDelivery:
        """Queue ``event`` keyed by ``key`` and return at once; the ``PendingDelivery`` says
        (when asked) whether the broker acknowledged it."""
        payload = event.model_dump(mode="json")
        validate(payload)
        delivery = PendingDelivery(self, key)
        try:
            client = self._client()
            client.produce(self.topic, key=key, value=event.to_json(), on_delivery=delivery.done)
            client.poll(0)  # serve the delivery reports of earlier events
        except (BufferError, KafkaException, ConfigError) as exc:
            log.warning("could not queue %s event for %s: %s", self.topic, key, exc)
            delivery.outcome = False
        return delivery

    def close(self) -> None:
        """Give queued events a last bounded chance, then drop the client."""
        _OPEN.discard(self)
        if self._producer is not None:
            left = self._producer.flush(self.timeout)
            if left:
                log.warning("%d %s event(s) not delivered before close", left, self.topic)
            self._producer = None


class PendingDelivery:
    """One sent event's outcome: unknown until the broker answers (or the client
    gives up on it)."""

    def __init__(self, publisher: EventPublisher, key: str) -> None:
        self._publisher = publisher
        self.key = key
        self.outcome: bool | None = None
        """True acknowledged, False failed, None not known yet."""

    def done(self, error: KafkaError | None, _message: Message) -> None:
        """The client's delivery report (served by ``poll``): log a failure now, so it
        is seen whether or not anyone asks."""
        self.outcome = error is None
        if error is None:
            return
        publisher = self._publisher
        if error.code() in REFUSALS:
            # Not weather: every later event will be refused too, until an admin acts.
            log.error(
                "Kafka refused the %s event for %s (%s): this process's principal "
                "(sasl.username %r) may not write %s; the commit itself is durable "
                "and the metrics catalog check finds it. Grant it with `firn kafka-acls`",
                publisher.topic,
                self.key,
                error.name(),
                publisher._settings.kafka_config.get("sasl.username"),
                publisher.topic,
            )
        else:
            log.warning("%s event for %s was not delivered: %s", publisher.topic, self.key, error)

    def delivered(self) -> bool:
        """Whether the broker acknowledged the event, waiting up to the publisher's
        timeout while that is not known yet."""
        publisher = self._publisher
        deadline = time.monotonic() + publisher.timeout
        client = publisher._producer
        while (
            self.outcome is None
            and client is not None
            and (left := deadline - time.monotonic()) > 0
        ):
            client.poll(min(left, 0.1))
        if self.outcome is None:
            log.warning(
                "%s event for %s not acknowledged within %.1fs; it stays queued, and the "
                "metrics catalog check recovers it if it is never delivered",
                publisher.topic,
                self.key,
                publisher.timeout,
            )
            return False
        return self.outcome


_OPEN: weakref.WeakSet[EventPublisher] = weakref.WeakSet()
"""Publishers not closed yet: their queued events are flushed at interpreter exit, so
a script that commits and ends without closing its catalog still tells the services."""


@atexit.register
def _flush_at_exit() -> None:
    for publisher in list(_OPEN):
        publisher.close()
