"""Pure pieces of the Kafka edge: topic naming and event decoding."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from firn.kafka.loop import ConsumeLoop, UnhandledEventError, decode
from firn.kafka.topics import Topics


def test_every_topic_derives_from_the_prefix() -> None:
    topics = Topics("t1.")
    assert topics.all() == (
        "t1.commits",
        "t1.plan-requests",
        "t1.plan-tasks",
        "t1.task-results",
        "t1.compactions",
        "t1.metrics-updates",
        "t1.dlq",
    )
    assert Topics().commits == "firn.commits"


def test_decode_returns_the_event_object() -> None:
    assert decode(b'{"event_type": "commit", "seq": 3}') == {"event_type": "commit", "seq": 3}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty"),
        (b"\xff\xfe", "not JSON"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "event_type"),
        (b'{"seq": 1}', "event_type"),
        (b'{"event_type": 7}', "event_type"),
    ],
)
def test_undecodable_values_are_unhandled_not_retryable(value: bytes | None, reason: str) -> None:
    with pytest.raises(UnhandledEventError, match=reason) as caught:
        decode(value)
    assert caught.value.retryable is False


class _RefusingConsumer:
    def __init__(self, code: int, fatal: bool = False) -> None:
        self.code = code
        self.fatal = fatal
        self.tries = 0

    def commit(self, **_: object) -> None:
        self.tries += 1
        raise KafkaException(KafkaError(self.code, fatal=self.fatal))


class _Message:
    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7


def _loop(code: int, fatal: bool = False) -> ConsumeLoop:
    return ConsumeLoop(
        _RefusingConsumer(code, fatal),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        topics=["t"],
        handlers={},
        dlq_topic="dlq",
        service="test",
        retry_backoff=0.001,
    )


def test_a_commit_refused_after_a_rebalance_is_not_fatal() -> None:
    # The partition moved to another member while the message was handled: that
    # member handles it again, this one carries on.
    _loop(KafkaError.ILLEGAL_GENERATION)._commit(_Message())  # type: ignore[arg-type]


def test_a_commit_refused_while_the_broker_restarts_is_tried_again_then_left() -> None:
    # The side effect is durable and handlers are idempotent: a later commit covers
    # this offset, so a coordinator that keeps loading must not stop the service.
    loop = _loop(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    loop._commit(_Message())  # type: ignore[arg-type]
    assert loop._consumer.tries == 6  # type: ignore[attr-defined]
    assert loop.transient_failures == loop._consumer.tries - 1  # type: ignore[attr-defined]


def test_a_stopping_loop_tries_a_refused_commit_once() -> None:
    loop = _loop(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    loop.stopping.set()
    loop._commit(_Message())  # type: ignore[arg-type]
    assert (loop._consumer.tries, loop.transient_failures) == (1, 0)  # type: ignore[attr-defined]


def test_a_fatal_commit_error_still_raises() -> None:
    with pytest.raises(KafkaException):
        _loop(KafkaError._FATAL, fatal=True)._commit(_Message())  # type: ignore[arg-type]
