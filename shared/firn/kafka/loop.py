"""The consume loop every confluent-kafka service runs.

Delivery is at least once: an offset is committed only after the handler's side
effect is durable (the handler returned) or the message was parked in the dead-letter
topic with its reason. No single message can stop a service:

- a *transient* failure (a retryable ``FirnError``, or an error the service lists as
  transient, such as a lost Postgres connection) leaves the offset where it is; the
  same message is handled again after a backoff that doubles up to a cap, so a
  database or broker restart pauses the service instead of ending it;
- anything else (undecodable, no handler, disagrees with the catalog, or a bug the
  handler did not expect) goes to the DLQ as a bounded ``dead-letter`` event and the
  loop moves on; if even that letter is refused by the broker, the message is skipped,
  logged and counted (``lost_dead_letters``), and the offset moves on.

A handler may run for a long time (a Spark job): it runs on a worker thread while
this thread keeps polling with the assignment paused, so the consumer never exceeds
``max.poll.interval.ms`` and never loses its group membership.
"""

from __future__ import annotations

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
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
    wait_exponential,
)

from firn.errors import FirnError
from firn.events.dead_letters import KEY_BYTES, DeadLetterEvent
from firn.kafka.delivery import DeliveryError, deliver
from firn.kafka.lag import consumer_lag, report_lag
from firn.observability.instruments import (
    CONSUMER_LAG,
    DEAD_LETTERS,
    LOST_DEAD_LETTERS,
    reason_kind,
)

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

_COMMIT_TRIES = 5
"""Offset commits tried while the broker refuses them for a passing reason."""

_KEEPALIVE_SECONDS = 0.5
"""A handler running longer than this gets the assignment paused and polls kept up."""


class UnhandledEventError(FirnError):
    """An event that no retry can make succeed: it belongs in the DLQ."""


def decode(value: bytes | None) -> Mapping[str, Any]:
    """The JSON object of a message value, or ``UnhandledEventError``."""
    if value is None:
        raise UnhandledEventError("empty message value")
    try:
        event = json.loads(value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
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
        transient: Callable[[BaseException], bool] = lambda exc: False,
        retry_backoff: float = 1.0,
        max_retry_backoff: float = 30.0,
        lag_every: float = 10.0,
    ) -> None:
        self._consumer = consumer
        self._producer = producer
        self._topics = topics
        self._handlers = handlers
        self._dlq_topic = dlq_topic
        self._service = service
        self._on_idle = on_idle
        self._transient = transient
        self._retry_backoff = retry_backoff
        self._max_retry_backoff = max_retry_backoff
        self._failures_in_a_row = 0
        self._lag_every = lag_every
        self._lag_at: float | None = None
        self._lag_reported: set[tuple[str, int]] = set()
        self._worker = concurrent.futures.ThreadPoolExecutor(1, f"{service}-handler")
        self.stopping = threading.Event()
        self.lost_dead_letters = 0
        """Messages skipped because even their bounded dead letter was refused."""
        self.transient_failures = 0
        """Handler and idle-work failures that were retried (database or broker away)."""

    def run(self) -> None:
        self._consumer.subscribe(self._topics)
        try:
            while not self.stopping.is_set():
                message = self._consumer.poll(0.5)
                self._idle()
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
            self._consumer.close()

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
        report_lag(CONSUMER_LAG, self._service, lag, self._lag_reported)
        self._lag_reported = set(lag)

    def _is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, FirnError):
            return exc.retryable
        return self._transient(exc)

    def _handle(self, message: Message) -> None:
        try:
            self._while_polling(lambda: self._dispatch(message))
        except Exception as exc:
            if self._is_transient(exc):
                self._retry_later(message, exc)
                return
            if not isinstance(exc, FirnError):
                log.exception("handler failed unexpectedly on %s", _where(message))
            try:
                self._park(message, _reason(exc), reason_kind(exc))
            except DeliveryError as park_failed:  # the broker is away: retry it all
                self._retry_later(message, park_failed)
                return
        self._failures_in_a_row = 0
        self._commit(message)

    def _dispatch(self, message: Message) -> None:
        event = decode(message.value())
        handler = self._handlers.get(event["event_type"])
        if handler is None:
            raise UnhandledEventError(f"no handler for event type {event['event_type']!r}")
        handler(event)

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
        try:
            while True:
                try:
                    future.result(timeout=_KEEPALIVE_SECONDS)
                    return
                except concurrent.futures.TimeoutError:
                    stray = self._consumer.poll(0)
                    if stray is not None and stray.error() is None:
                        # Assigned during a rebalance, so not paused: read it again later.
                        topic, partition, offset = _position(stray)
                        self._consumer.seek(TopicPartition(topic, partition, offset))
                        paused |= self._pause_all()
        finally:
            assigned = {(p.topic, p.partition) for p in self._consumer.assignment()}
            resume = [TopicPartition(t, p) for t, p in paused if (t, p) in assigned]
            if resume:
                self._consumer.resume(resume)

    def _pause_all(self) -> set[tuple[str, int]]:
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.pause(assignment)
        return {(p.topic, p.partition) for p in assignment}

    def _retry_later(self, message: Message, exc: BaseException) -> None:
        self._failures_in_a_row += 1
        self.transient_failures += 1
        wait = min(
            self._retry_backoff * 2.0 ** (self._failures_in_a_row - 1), self._max_retry_backoff
        )
        topic, partition, offset = _position(message)
        log.warning(
            "transient failure on %s[%d]@%d, retrying in %.1fs: %r",
            topic,
            partition,
            offset,
            wait,
            exc,
        )
        self._consumer.seek(TopicPartition(topic, partition, offset))
        self.stopping.wait(wait)

    def _commit(self, message: Message) -> None:
        """Commit past ``message``. If the group rebalanced while it was handled, the
        partition may belong to another member now: the commit is refused, the new
        owner handles the message again (handlers are idempotent), and this member
        carries on with what it was given. A broker that is restarting (coordinator
        loading or moved, timeouts) gets a few tries with backoff; if it still refuses,
        the loop goes on: the next commit covers this offset, and until then a
        redelivery would only repeat an idempotent handler."""

        def worth_retrying(exc: BaseException) -> bool:
            error = exc.args[0] if isinstance(exc, KafkaException) else None
            return isinstance(error, KafkaError) and not (
                error.code() in _REBALANCED or error.fatal()
            )

        def count(_: RetryCallState) -> None:
            self.transient_failures += 1

        def give_up(state: RetryCallState) -> None:
            assert state.outcome is not None
            exc = state.outcome.exception()
            log.warning(
                "offset of %s not committed after %d tries, going on: %s",
                _where(message),
                state.attempt_number,
                exc.args[0].str() if exc is not None else "",
            )

        def pause(seconds: float) -> None:  # cut short when the loop stops
            self.stopping.wait(seconds)

        retrying = Retrying(
            retry=retry_if_exception(worth_retrying),
            stop=stop_after_attempt(_COMMIT_TRIES + 1) | stop_when_event_set(self.stopping),
            wait=wait_exponential(multiplier=self._retry_backoff, max=8.0),
            sleep=pause,
            before_sleep=count,
            retry_error_callback=give_up,
        )
        try:
            retrying(self._consumer.commit, message=message, asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() not in _REBALANCED:
                raise
            log.warning(
                "offset of %s not committed, the group rebalanced: %s", _where(message), error.str()
            )

    def _park(self, message: Message, reason: str, kind: str) -> None:
        """Send a bounded dead letter for the message and wait until the broker has
        it; if the broker refuses even that, skip the message (logged and counted)."""
        letter = DeadLetterEvent.of(
            service=self._service,
            source=_position(message),
            key=message.key(),
            value=message.value(),
            reason=reason,
        )
        log.warning("parking %s in %s: %s", _where(message), self._dlq_topic, letter.reason)
        key = message.key()
        try:
            deliver(
                self._producer,
                self._dlq_topic,
                key=key[:KEY_BYTES] if isinstance(key, bytes) else None,
                value=letter.to_json(),
                headers=letter.headers(),
            )
            DEAD_LETTERS.labels(self._service, kind).inc()
        except DeliveryError as exc:
            if exc.retryable:
                raise
            self.lost_dead_letters += 1
            LOST_DEAD_LETTERS.labels(self._service).inc()
            log.error(
                "the dead letter for %s was refused (%s): message skipped; "
                "%d skipped so far by this process",
                _where(message),
                exc,
                self.lost_dead_letters,
            )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FirnError):
        return str(exc)
    return f"unexpected {type(exc).__name__} in the handler: {exc}"


def _where(message: Message) -> str:
    return f"{message.topic()}[{message.partition()}]@{message.offset()}"


def _position(message: Message) -> tuple[str, int, int]:
    """Topic, partition and offset: always set on a message a consumer returned."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise FirnError("a consumed message without a position")
    return topic, partition, offset
