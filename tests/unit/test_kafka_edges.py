"""Pure pieces of the Kafka edge: topic naming, event decoding, and the consume
loop's retries and offsets against a recorded consumer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from firn.errors import FirnError
from firn.events.wire import UnhandledEventError, decode
from firn.kafka.loop import ConsumeLoop, stuck_group
from firn.kafka.topics import Topics
from tests.waiting import eventually


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


class _Message:
    def __init__(self, offset: int, value: bytes, partition: int = 0) -> None:
        self._offset, self._value, self._partition = offset, value, partition

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self._value

    def error(self) -> None:
        return None


class _Consumer:
    """The calls the loop makes, recorded; ``seek`` is refused: the loop must retry
    the message in hand instead (a partition sought during a broker restart was
    never fetched again)."""

    def __init__(self, *messages: _Message, partitions: int = 1) -> None:
        self.queue = list(messages)
        self.owned = {("t", p) for p in range(partitions)}
        self.paused: set[tuple[str, int]] = set()
        self.stored: list[int] = []
        self.polls_while_paused = 0
        self.handed_while_paused: list[int] = []

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self.owned)]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in partitions}

    def poll(self, _timeout: float) -> _Message | None:
        if self.paused:
            self.polls_while_paused += 1
        for message in self.queue:
            if ("t", message.partition()) not in self.paused:
                self.queue.remove(message)
                if self.paused:
                    self.handed_while_paused.append(message.offset())
                return message
        return None

    def seek(self, _partition: TopicPartition) -> None:
        raise AssertionError("the loop sought back instead of retrying in hand")

    def store_offsets(self, *, message: _Message) -> None:
        if ("t", message.partition()) not in self.owned:
            raise KafkaException(KafkaError(KafkaError._STATE, "not assigned"))
        self.stored.append(message.offset())


def _ping(n: int, partition: int = 0) -> _Message:
    return _Message(n, json.dumps({"event_type": "ping", "n": n}).encode(), partition)


def _loop(consumer: _Consumer, ping: Callable[[Mapping[str, Any]], None]) -> ConsumeLoop:
    return ConsumeLoop(
        lambda **_: consumer,
        None,  # type: ignore[arg-type]
        topics=["t"],
        handlers={"ping": ping},
        read=dict,  # test events, not Firn's: handed on as decoded
        dlq_topic="dlq",
        service="test",
        retry_backoff=0.6,  # above the keep-alive: the wait polls
    )


def test_a_transient_failure_retries_the_message_in_hand_polling_meanwhile() -> None:
    consumer = _Consumer()
    tries = []

    def ping(event: Mapping[str, Any]) -> None:
        tries.append(event["n"])
        if len(tries) < 3:
            raise FirnError("database restarting", retryable=True)

    loop = _loop(consumer, ping)
    try:
        loop._handle(_ping(4))  # type: ignore[arg-type]
    finally:
        loop._worker.shutdown()
    assert tries == [4, 4, 4]
    assert consumer.stored == [4]
    assert loop.transient_failures == 2
    assert consumer.polls_while_paused > 0, "the member stopped polling while it waited"
    assert consumer.paused == set(), "the assignment was left paused"


def test_a_message_whose_partition_moved_while_it_waited_is_left_to_the_new_owner() -> None:
    consumer = _Consumer()
    tries = []

    def ping(event: Mapping[str, Any]) -> None:
        tries.append(event["n"])
        consumer.owned.clear()  # revoked during the backoff that follows
        raise FirnError("database restarting", retryable=True)

    loop = _loop(consumer, ping)
    try:
        loop._handle(_ping(4))  # type: ignore[arg-type]
    finally:
        loop._worker.shutdown()
    assert (tries, consumer.stored) == ([4], [])


def test_a_stopping_loop_leaves_a_failing_message_unstored() -> None:
    consumer = _Consumer()
    loop = _loop(consumer, lambda event: loop.stopping.set() or _raise_transient())
    try:
        loop._handle(_ping(4))  # type: ignore[arg-type]
    finally:
        loop._worker.shutdown()
    assert consumer.stored == []  # redelivered after the restart


def _raise_transient() -> None:
    raise FirnError("database restarting", retryable=True)


def test_messages_of_a_partition_assigned_mid_handler_are_held_in_order() -> None:
    # Partition 1 comes with a rebalance while a slow handler runs (not paused yet):
    # what the consumer hands over then is held and handled next, in order.
    consumer = _Consumer(_ping(10, partition=1), _ping(11, partition=1), partitions=1)
    seen = []

    def ping(event: Mapping[str, Any]) -> None:
        seen.append(event["n"])
        if event["n"] == 0:
            eventually(lambda: loop.paused, timeout=10, what="the assignment paused")
            consumer.owned.add(("t", 1))
            eventually(
                lambda: consumer.handed_while_paused,
                timeout=10,
                what="partition 1's first message handed over mid-handler",
            )

    loop = _loop(consumer, ping)
    try:
        loop._handle(_ping(0))  # type: ignore[arg-type]
        while (message := loop._next_message()) is not None:
            loop._handle(message)
    finally:
        loop._worker.shutdown()
    assert seen == [0, 10, 11]
    assert consumer.stored == [0, 10, 11]
    assert consumer.handed_while_paused == [10]


def test_a_store_refused_after_a_rebalance_is_not_fatal() -> None:
    # The partition moved to another member while the message was handled: that
    # member handles it again, this one carries on.
    consumer = _Consumer()
    consumer.owned.clear()
    loop = _loop(consumer, lambda event: None)
    try:
        loop._handle(_ping(4))  # type: ignore[arg-type]
    finally:
        loop._worker.shutdown()
    assert consumer.stored == []


@pytest.mark.parametrize(
    ("group", "stuck"),
    [
        ({"state": "up", "stateage": 900_000}, False),
        ({"state": "query-coord", "stateage": 30_000}, False),
        ({"state": "query-coord", "stateage": 61_000}, True),
        ({"state": "wait-coord", "stateage": 600_000}, True),
        (None, False),  # a consumer without a group
    ],
)
def test_a_group_without_a_coordinator_for_too_long_is_stuck(
    group: dict[str, Any] | None, stuck: bool
) -> None:
    statistics = {"name": "rdkafka#consumer-1"} | ({"cgrp": group} if group else {})
    reason = stuck_group(statistics, stuck_after=60)
    assert (reason is not None) == stuck
    if reason is not None:
        assert group is not None
        assert repr(group["state"]) in reason


class _StuckConsumer(_Consumer):
    """Its statistics say the group has had no coordinator for ten minutes."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        self.report = config["stats_cb"]
        self.subscribed: list[str] = []
        self.closed = threading.Event()

    def subscribe(self, topics: list[str]) -> None:
        self.subscribed = topics

    def poll(self, timeout: float) -> _Message | None:
        self.report(json.dumps({"cgrp": {"state": "query-coord", "stateage": 600_000}}))
        return super().poll(timeout)

    def close(self) -> None:
        self.closed.set()


class _HealthyConsumer(_StuckConsumer):
    def __init__(self, config: Mapping[str, Any], loop: Callable[[], ConsumeLoop]) -> None:
        super().__init__(config)
        self.loop = loop

    def poll(self, timeout: float) -> _Message | None:
        self.report(json.dumps({"cgrp": {"state": "up", "stateage": 600_000}}))
        self.loop().stopping.set()
        return None


class _Flushing:
    def flush(self, _timeout: float) -> int:
        return 0


def test_a_stuck_consumer_is_replaced_by_a_new_one_on_the_same_topics() -> None:
    made: list[_StuckConsumer] = []

    def make(**config: Any) -> _StuckConsumer:
        fresh = _StuckConsumer(config) if not made else _HealthyConsumer(config, lambda: loop)
        made.append(fresh)
        return fresh

    loop = ConsumeLoop(
        make,
        _Flushing(),  # type: ignore[arg-type]
        topics=["t"],
        handlers={},
        dlq_topic="dlq",
        service="test",
        stuck_after=60,
    )
    loop.run()
    assert (len(made), loop.renewals) == (2, 1)
    assert made[0].closed.wait(5), "the replaced consumer was not closed"
    assert made[1].subscribed == ["t"]
    assert made[1].closed.is_set()  # the loop's own close, on stopping
