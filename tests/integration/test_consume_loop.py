"""The service consume loop on the real broker: DLQ, retries, offsets after effects."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from firn.errors import FirnError
from firn.events.schemas import validate
from firn.kafka import Topics, consumer, ensure_topics, producer
from firn.kafka.loop import ConsumeLoop
from firn.settings import FirnSettings
from firn_localstack import KafkaBroker
from tests.integration.conftest import REPO
from tests.waiting import eventually, messages_on


def _event(kind: str, n: int) -> bytes:
    return json.dumps({"event_type": kind, "n": n}).encode()


def _publish(settings: FirnSettings, values: list[bytes]) -> Topics:
    """Create this test's topics (one partition, so order is total) and fill commits."""
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    out = producer(settings)
    for value in values:
        out.produce(topics.commits, key=b"k", value=value)
    assert out.flush(10) == 0
    return topics


def _run_until(loop: ConsumeLoop, done: threading.Event, timeout: float = 60) -> None:
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    done.wait(timeout)
    loop.stopping.set()
    thread.join(30)
    assert not thread.is_alive()


def _drain(settings: FirnSettings, topic: str, group: str, expect: int) -> list[Any]:
    return messages_on(settings, topic, group, expect=expect)


def _left_over(settings: FirnSettings, topic: str, group: str) -> list[bytes | None]:
    """What a new member of ``group`` still gets from ``topic`` (uncommitted offsets)."""
    return [m.value() for m in messages_on(settings, topic, group, expect=None, timeout=8)]


def test_bad_events_are_parked_with_a_reason_and_the_loop_goes_on(
    settings: FirnSettings, unique: str
) -> None:
    topics = _publish(settings, [b"not json", _event("mystery", 1), _event("ping", 2)])

    seen: list[int] = []
    done = threading.Event()

    def ping(event: Mapping[str, Any]) -> None:
        seen.append(event["n"])
        done.set()

    group = f"loop-{unique}"
    loop = ConsumeLoop(
        lambda **extra: consumer(settings, group, **extra),
        producer(settings),
        topics=[topics.commits],
        handlers={"ping": ping},
        read=dict,  # test events, not Firn's: handed on as decoded
        dlq_topic=topics.dlq,
        service="test",
    )
    _run_until(loop, done)
    assert seen == [2]

    parked = _drain(settings, topics.dlq, f"dlq-{unique}", expect=2)
    reasons = [dict(m.headers())["firn.reason"].decode() for m in parked]
    letters = [json.loads(m.value()) for m in parked]
    for letter, reason in zip(letters, reasons, strict=True):
        validate(letter)
        assert letter["event_type"] == "dead-letter"
        assert letter["reason"] == reason
        assert letter["source_topic"] == topics.commits
        assert letter["service"] == "test"
    # A small original travels whole, as text, in the dead letter.
    assert [letter["payload"].encode() for letter in letters] == [
        b"not json",
        _event("mystery", 1),
    ]
    assert reasons[0].startswith("not JSON")
    assert "no handler for event type 'mystery'" in reasons[1]

    # Every offset was committed: a restarted member of the group gets nothing again.
    assert _left_over(settings, topics.commits, group) == []


def test_a_retryable_failure_is_handled_again_not_skipped(
    settings: FirnSettings, unique: str
) -> None:
    topics = _publish(settings, [_event("ping", n) for n in range(3)])

    handled: list[int] = []
    failures = {"left": 2}
    done = threading.Event()

    def flaky(event: Mapping[str, Any]) -> None:
        if event["n"] == 1 and failures["left"] > 0:
            failures["left"] -= 1
            raise FirnError("database briefly away", retryable=True)
        handled.append(event["n"])
        if len(handled) == 3:
            done.set()

    loop = ConsumeLoop(
        lambda **extra: consumer(settings, f"retry-{unique}", **extra),
        producer(settings),
        topics=[topics.commits],
        handlers={"ping": flaky},
        read=dict,  # test events, not Firn's: handed on as decoded
        dlq_topic=topics.dlq,
        service="test",
        retry_backoff=0.1,
    )
    _run_until(loop, done)
    assert handled == [0, 1, 2]
    assert failures["left"] == 0


def test_a_handler_longer_than_the_poll_interval_keeps_the_group_membership(
    settings: FirnSettings, unique: str
) -> None:
    """A Spark job may outlast ``max.poll.interval.ms``; the loop keeps polling with
    the assignment paused, so the member is not evicted, its commit is accepted, and
    the message is not handled twice."""
    topics = _publish(settings, [_event("slow", 0), _event("slow", 1)])
    handled: list[int] = []
    done = threading.Event()

    def slow(event: Mapping[str, Any]) -> None:
        if event["n"] == 0:
            time.sleep(10)  # well past max.poll.interval.ms below
        handled.append(event["n"])
        if len(handled) >= 2:
            done.set()

    group = f"slow-{unique}"
    tight = {"max.poll.interval.ms": 6000, "session.timeout.ms": 6000}
    loop = ConsumeLoop(
        lambda **extra: consumer(settings, group, **tight, **extra),
        producer(settings),
        topics=[topics.commits],
        handlers={"slow": slow},
        read=dict,  # test events, not Firn's: handed on as decoded
        dlq_topic=topics.dlq,
        service="test",
    )
    _run_until(loop, done)
    assert handled == [0, 1]
    leftovers = _left_over(settings, topics.commits, group)
    assert leftovers == [], "an offset was not committed: the member had been evicted"


def test_an_unexpected_error_parks_the_message_and_a_transient_one_retries_it(
    settings: FirnSettings, unique: str
) -> None:
    topics = _publish(settings, [_event("ping", n) for n in range(3)])
    handled: list[int] = []
    blips = {"left": 2}
    done = threading.Event()

    def buggy(event: Mapping[str, Any]) -> None:
        if event["n"] == 0:
            raise KeyError("a bug for this one message")
        if event["n"] == 1 and blips["left"] > 0:
            blips["left"] -= 1
            raise ConnectionResetError("database restarting")
        handled.append(event["n"])
        if len(handled) == 2:
            done.set()

    loop = ConsumeLoop(
        lambda **extra: consumer(settings, f"bug-{unique}", **extra),
        producer(settings),
        topics=[topics.commits],
        handlers={"ping": buggy},
        read=dict,  # test events, not Firn's: handed on as decoded
        dlq_topic=topics.dlq,
        service="test",
        transient=lambda exc: isinstance(exc, ConnectionResetError),
        retry_backoff=0.1,
    )
    _run_until(loop, done)
    assert handled == [1, 2]
    assert loop.transient_failures == 2
    parked = _drain(settings, topics.dlq, f"dlq-{unique}", expect=1)
    assert [json.loads(m.value())["reason"] for m in parked] == [
        "unexpected KeyError in the handler: 'a bug for this one message'"
    ]


def test_a_consumer_whose_group_finds_no_coordinator_is_replaced_and_consumes(
    settings: FirnSettings, unique: str, tmp_path: Path
) -> None:
    """The loop starts while its broker is down, so its group has no coordinator past
    ``stuck_after``: the consumer is replaced, and once the broker is back the
    replacement consumes. (After a real broker restart librdkafka sometimes never asks
    for the coordinator again, which no waiting cures; this test makes a group without
    a coordinator on purpose.)"""
    broker = KafkaBroker(REPO / ".firn" / "cache", tmp_path / "kafka")
    broker.start()
    try:
        own = settings.model_copy(update={"kafka_bootstrap": broker.bootstrap})
        topics = _publish(own, [_event("ping", 1)])
        broker.stop()
        seen = threading.Event()
        loop = ConsumeLoop(
            lambda **extra: consumer(own, f"renew-{unique}", **extra),
            producer(own),
            topics=[topics.commits],
            handlers={"ping": lambda event: seen.set()},
            read=dict,  # test events, not Firn's: handed on as decoded
            dlq_topic=topics.dlq,
            service="test",
            stuck_after=6,
        )
        thread = threading.Thread(target=loop.run, daemon=True)
        thread.start()
        try:
            eventually(
                lambda: loop.renewals >= 1,
                timeout=60,
                every=0.5,
                what="the consumer without a coordinator replaced",
            )
            broker.start()
            assert seen.wait(90), "the replacement consumer never consumed"
        finally:
            loop.stopping.set()
            thread.join(30)
    finally:
        broker.stop()


def test_a_partition_that_leaves_and_returns_during_a_handler_is_consumed_again(
    settings: FirnSettings, unique: str
) -> None:
    """While a handler runs, the loop pauses its assignment. A partition that goes to
    another member meanwhile, and comes back after the handler ended, must be fetched
    again: librdkafka keeps a partition paused by the application across a revocation
    and a new assignment, so a loop that resumed only what it still held when the
    handler ended never consumed that partition again (seen as a dispatcher consuming
    nothing after broker restarts, its session having timed out mid-handler)."""
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=2)
    out = producer(settings)
    out.produce(topics.commits, partition=0, value=_event("slow", -1))
    assert out.flush(10) == 0
    group = f"return-{unique}"
    tight = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    handling = threading.Event()
    release = threading.Event()
    pinged: set[int] = set()
    both = threading.Event()

    def slow(event: Mapping[str, Any]) -> None:
        handling.set()
        release.wait(60)

    def ping(event: Mapping[str, Any]) -> None:
        pinged.add(event["n"])
        if pinged == {0, 1}:
            both.set()

    loop = ConsumeLoop(
        lambda **extra: consumer(settings, group, **tight, **extra),
        producer(settings),
        topics=[topics.commits],
        handlers={"slow": slow, "ping": ping},
        read=dict,  # test events, not Firn's: handed on as decoded
        dlq_topic=topics.dlq,
        service="test",
    )
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        assert handling.wait(60), "the slow event was never handled"
        eventually(lambda: loop.paused, timeout=30, what="the loop pausing its assignment")
        # A second member takes one partition (cooperative rebalancing: the other
        # stays with the loop); it neither handles nor commits anything.
        other = consumer(settings, group, **tight, **{"enable.auto.commit": False})
        other.subscribe([topics.commits])

        def assigned() -> list[Any]:
            other.poll(0.2)  # the group's join happens while polling
            return list(other.assignment())

        eventually(assigned, timeout=60, every=0, what="the second member getting a partition")
        release.set()  # the handler ends while one partition is the other member's
        eventually(lambda: not loop.paused, timeout=30, what="the loop resuming")
        other.close()  # it leaves: both partitions return to the loop
        for partition in (0, 1):
            out.produce(topics.commits, partition=partition, value=_event("ping", partition))
        assert out.flush(10) == 0
        assert both.wait(60), f"only partitions {sorted(pinged)} were consumed after"
    finally:
        release.set()
        loop.stopping.set()
        thread.join(30)
