"""The consume loop every confluent-kafka service runs.

Each message is decoded once, here (``firn.events.wire``): its handler is looked up
by ``event_type`` and handed the event read as its model, so handlers never see a
dict or check a schema.

Delivery is at least once: a message's offset is stored (and then committed by the
consumer in the background, on a revocation and on close) only after the handler's
side effect is durable (the handler returned) or the message was parked in the
dead-letter topic with its reason. No single message can stop a service:

- a *transient* failure (a retryable ``FirnError``, or an error the service lists as
  transient, such as a lost Postgres connection) keeps the message in hand: it is
  handled again after a backoff that doubles up to a cap, polling meanwhile, so a
  database or broker restart pauses the service instead of ending it;
- anything else (undecodable, no handler, disagrees with the catalog, or a bug the
  handler did not expect) goes to the DLQ as a bounded ``dead-letter`` event and the
  loop moves on; if even that letter is refused by the broker, the message is skipped,
  logged and counted (``lost_dead_letters``), and the offset moves on.

A handler may run for a long time (a Spark job): it runs on a worker thread while
this thread keeps polling with the assignment paused, so the consumer never exceeds
``max.poll.interval.ms`` and never loses its group membership.

A consumer whose group has had no coordinator for ``stuck_after`` seconds (its
statistics say so every few seconds) is replaced by a new one: after a broker
restart, librdkafka sometimes never finds the coordinator again (the group state stays
away from ``up`` while the broker serves everyone else), and a service would sit
alive, polling, consuming nothing.
"""

from __future__ import annotations

import collections
import concurrent.futures
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
from firn.events.wire import UnhandledEventError, as_event, decode
from firn.kafka.delivery import DeliveryError, deliver
from firn.kafka.lag import consumer_lag, report_lag
from firn.kafka.parking import DeadLetterDesk
from firn.model.backoff import Backoff
from firn.sensors import sensors

log = logging.getLogger(__name__)

EventHandler = Callable[[Any], None]
"""Handles one event, read as its model; raises a FirnError (retryable or not) when it
cannot."""

ConsumerFactory = Callable[..., Consumer]
"""Makes the loop's consumer, given extra librdkafka properties (keyword arguments)."""

_STATISTICS_MS = 5000
"""How often the consumer reports its group state (``stats_cb``)."""


_KEEPALIVE_SECONDS = 0.5
"""A handler running longer than this gets the assignment paused and polls kept up."""


class ConsumeLoop:
    """Poll, dispatch by ``event_type``, commit; park what cannot be handled."""

    def __init__(
        self,
        consumer: ConsumerFactory,
        producer: Producer,
        *,
        topics: list[str],
        handlers: Mapping[str, EventHandler],
        dlq_topic: str,
        service: str,
        on_idle: Callable[[], None] = lambda: None,
        read: Callable[[Mapping[str, Any]], object] = as_event,
        transient: Callable[[BaseException], bool] = lambda exc: False,
        retry_backoff: float = 1.0,
        max_retry_backoff: float = 30.0,
        lag_every: float = 10.0,
        stuck_after: float = 60.0,
    ) -> None:
        self._make_consumer = consumer
        self._stuck_after = stuck_after
        self._stuck: str | None = None
        self._consumer = self._new_consumer()
        self._producer = producer
        self._topics = topics
        self._handlers = handlers
        self._read = read
        """What a handler is handed of a decoded event: its model (``as_event``)."""
        self._dlq_topic = dlq_topic
        self._service = service
        self._on_idle = on_idle
        self._transient = transient
        self._backoff = Backoff(first=retry_backoff, cap=max_retry_backoff)
        self._failures_in_a_row = 0
        self._lag_every = lag_every
        self._lag_at: float | None = None
        self._lag_reported: set[tuple[str, int]] = set()
        self._held: collections.deque[Message] = collections.deque()
        self._worker = concurrent.futures.ThreadPoolExecutor(1, f"{service}-handler")
        self.stopping = threading.Event()
        self._desk = DeadLetterDesk(service, dlq_topic)
        """Messages skipped because even their bounded dead letter was refused."""
        self.transient_failures = 0
        """Handler and idle-work failures that were retried (database or broker away)."""
        self.paused: frozenset[tuple[str, int]] = frozenset()
        """The partitions paused while a long handler runs (empty otherwise): what the
        loop resumes when it ends."""
        self.renewals = 0
        """Consumers replaced because their group had no coordinator for too long."""

    def run(self) -> None:
        self._consumer.subscribe(self._topics)
        try:
            while not self.stopping.is_set():
                message = self._next_message()
                self._idle()
                if self._stuck is not None:
                    self._renew()
                    continue
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
            self._worker.shutdown(wait=True)
            self._producer.flush(10)
            self._consumer.close()  # commits the offsets stored so far

    def _new_consumer(self) -> Consumer:
        return self._make_consumer(
            **{"statistics.interval.ms": _STATISTICS_MS, "stats_cb": self._on_statistics}
        )

    def _on_statistics(self, statistics: str) -> None:
        """Called from ``poll``, on this thread."""
        self._stuck = stuck_group(json.loads(statistics), self._stuck_after)

    def _renew(self) -> None:
        """Replace the consumer, subscribed to the same topics. The old one is closed
        on a thread of its own (a close without a coordinator may wait long); what it
        held or stored but did not commit is redelivered to whoever owns it next."""
        log.warning("%s: replacing the Kafka consumer, %s", self._service, self._stuck)
        self._stuck = None
        old = self._consumer
        self._held.clear()
        threading.Thread(target=_close_quietly, args=(old,), daemon=True).start()
        self._consumer = self._new_consumer()
        self._consumer.subscribe(self._topics)
        self.renewals += 1
        sensors().consumer_renewed(self._service)

    def _idle(self) -> None:
        """Periodic work (heartbeats, sweeps) must not end the service when the
        database or broker is away: it runs again at its next turn."""
        self._measure_lag()
        try:
            self._on_idle()
        except Exception as exc:
            if not self._is_transient(exc):
                raise
            self.transient_failures += 1
            log.warning("periodic work failed, retried at its next turn: %r", exc)

    def _measure_lag(self) -> None:
        """Report the consumer lag (``firn_kafka_consumer_lag``) every ``lag_every``
        seconds; a broker that does not answer leaves the last figures in place."""
        now = time.monotonic()
        if self._lag_at is not None and now - self._lag_at < self._lag_every:
            return
        self._lag_at = now
        try:
            lag = consumer_lag(self._consumer)
        except Exception as exc:  # a measurement must never stop the loop
            log.debug("consumer lag not measured: %r", exc)
            return
        report_lag(self._service, lag, self._lag_reported)
        self._lag_reported = set(lag)

    def _is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, FirnError):
            return exc.retryable
        return self._transient(exc)

    def _next_message(self) -> Message | None:
        """A message held back while a handler ran, if its partition is still ours,
        else the next one from the consumer."""
        while self._held:
            message = self._held.popleft()
            if self._owns(message):
                return message
            log.info("%s left to its partition's new owner", _where(message))
        return self._consumer.poll(0.5)

    def _owns(self, message: Message) -> bool:
        return (message.topic(), message.partition()) in {
            (p.topic, p.partition) for p in self._consumer.assignment()
        }

    def _handle(self, message: Message) -> None:
        """Handle ``message`` until it succeeds or is parked; a transient failure
        retries the message in hand after a backoff (never a seek: librdkafka left a
        partition sought during a broker restart unfetched for good)."""
        while not self.stopping.is_set():
            try:
                self._while_polling(lambda: self._dispatch(message))
            except Exception as exc:
                if self._is_transient(exc):
                    if self._back_off(message, exc):
                        continue
                    return
                if not isinstance(exc, FirnError):
                    log.exception("handler failed unexpectedly on %s", _where(message))
                try:
                    self._park(message, exc)
                except DeliveryError as park_failed:  # the broker is away: retry it all
                    if self._back_off(message, park_failed):
                        continue
                    return
            self._failures_in_a_row = 0
            self._store(message)
            return

    def _dispatch(self, message: Message) -> None:
        raw = decode(message.value())
        handler = self._handlers.get(raw["event_type"])
        if handler is None:
            raise UnhandledEventError(f"no handler for event type {raw['event_type']!r}")
        handler(self._read(raw))

    def _while_polling(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the worker thread; if it takes long, pause the assignment
        and keep polling so the group does not evict this member meanwhile."""
        future = self._worker.submit(work)
        try:
            future.result(timeout=_KEEPALIVE_SECONDS)
            return
        except concurrent.futures.TimeoutError:
            pass
        paused = self._pause_all()
        self.paused = frozenset(paused)
        try:
            while True:
                try:
                    future.result(timeout=_KEEPALIVE_SECONDS)
                    return
                except concurrent.futures.TimeoutError:
                    stray = self._consumer.poll(0)
                    if stray is not None and stray.error() is None:
                        # Assigned during a rebalance, so not paused: held, in the
                        # order it came, and handled before anything polled later.
                        self._held.append(stray)
                        paused |= self._pause_all()
                        self.paused = frozenset(paused)
        finally:
            # Every partition paused here is resumed, still held or not: librdkafka keeps
            # an application's pause across a revocation and a later assignment, so a
            # partition that left during the handler (a rebalance, a session timeout)
            # would come back paused and never be fetched again.
            if paused:
                self._consumer.resume([TopicPartition(t, p) for t, p in paused])
            self.paused = frozenset()

    def _pause_all(self) -> set[tuple[str, int]]:
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.pause(assignment)
        return {(p.topic, p.partition) for p in assignment}

    def _back_off(self, message: Message, exc: BaseException) -> bool:
        """Wait before ``message`` is handled again, polling meanwhile. False when it
        should not be: the loop is stopping (the message is redelivered after a
        restart) or its partition went to another member (which handles it)."""
        self._failures_in_a_row += 1
        self.transient_failures += 1
        wait = self._backoff.after(self._failures_in_a_row)
        log.warning("transient failure on %s, retrying in %.1fs: %r", _where(message), wait, exc)
        self._while_polling(lambda: self._sleep(wait))
        if self.stopping.is_set():
            return False
        if not self._owns(message):
            log.warning("%s not retried here: its partition has a new owner", _where(message))
            return False
        return True

    def _sleep(self, seconds: float) -> None:
        self.stopping.wait(seconds)

    def _store(self, message: Message) -> None:
        """Mark ``message`` done: its offset is committed in the background (and on
        close or a revocation). Never a blocking commit: librdkafka holds a
        synchronous commit until a group coordinator answers, and one that was
        lost in a broker restart held a service for good. If the group rebalanced
        while the message was handled, the partition may belong to another member:
        the store is refused, the new owner handles the message again (handlers are
        idempotent), and this member carries on."""
        try:
            self._consumer.store_offsets(message=message)
        except KafkaException as exc:
            log.warning("offset of %s not stored: %s", _where(message), exc.args[0].str())

    def _park(self, message: Message, exc: BaseException) -> None:
        """Send a bounded dead letter for the message and wait until the broker has
        it; if the broker refuses even that, skip the message (logged and counted)."""
        source = _position(message)
        letter = self._desk.letter(source, message.key(), message.value(), exc)
        try:
            deliver(
                self._producer,
                self._dlq_topic,
                key=letter.key,
                value=letter.value,
                headers=letter.headers,
            )
            self._desk.parked(exc)
        except DeliveryError as refused:
            if refused.retryable:
                raise
            self._desk.refused(source, refused)

    @property
    def lost_dead_letters(self) -> int:
        """Messages skipped because even their dead letter was refused."""
        return self._desk.lost


def stuck_group(statistics: Mapping[str, Any], stuck_after: float) -> str | None:
    """Why a consumer's group counts as stuck, from librdkafka's statistics: its state
    (``up`` once a coordinator answers) has been something else for ``stuck_after``
    seconds. None while it is fine, or the consumer has no group."""
    group = statistics.get("cgrp")
    if not isinstance(group, Mapping):
        return None
    state, age_ms = group.get("state"), group.get("stateage", 0)
    if state == "up" or age_ms < stuck_after * 1000:
        return None
    return f"its group has been in state {state!r} for {age_ms / 1000:.0f}s (no coordinator)"


def _close_quietly(consumer: Consumer) -> None:
    try:
        consumer.close()
    except Exception as exc:  # a replaced consumer: nothing depends on its close
        log.info("closing a replaced consumer failed: %r", exc)


def _where(message: Message) -> str:
    return f"{message.topic()}[{message.partition()}]@{message.offset()}"


def _position(message: Message) -> tuple[str, int, int]:
    """Topic, partition and offset: always set on a message a consumer returned."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise FirnError("a consumed message without a position")
    return topic, partition, offset
