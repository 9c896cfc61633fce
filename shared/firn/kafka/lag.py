"""Consumer lag: how many messages of a topic partition a consumer has yet to read.

A service's own ``ConsumeLoop`` asks its consumer (``consumer_lag``: its position,
else its group's committed offset, else the start of the partition, since Firn's
consumers start at the earliest offset). The metrics service's Faust worker keeps
its consumer to itself, so its group's committed offsets are read by a consumer of
its own that never subscribes (``group_lag``), on a thread of its own; there the high
watermark is asked of the broker. A service's loop takes the watermark its fetches
already brought back instead: asking held its events for about a second.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from firn.sensors import sensors

Lag = dict[tuple[str, int], int]
"""(topic, partition) -> messages not read yet."""


def lag_of(high: int, *positions: int) -> int | None:
    """``high`` minus the first valid (non-negative) position; None when the high
    watermark is unknown. Never below 0 (a position read after the watermark)."""
    if high < 0:
        return None
    for position in positions:
        if position >= 0:
            return max(0, high - position)
    return None


def consumer_lag(consumer: Consumer, timeout: float = 1.0) -> Lag:
    """The lag of each partition assigned to ``consumer``, from the high watermarks
    its own fetches bring back (librdkafka caches them): no request to the broker.
    This runs on the service's consume loop, where asking the broker (``ListOffsets``
    per partition) held every event for about a second each time the lag was
    measured, so the whole compaction cycle stalled every ten seconds. A partition
    not fetched yet has no watermark and is left out until it has."""
    assignment = consumer.assignment()
    if not assignment:
        return {}
    positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(assignment)}
    unread = [TopicPartition(t, p) for (t, p), offset in positions.items() if offset < 0]
    committed = {}
    if unread:
        committed = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.committed(unread, timeout=timeout)
        }
    lag: Lag = {}
    for (topic, partition), offset in positions.items():
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        found = lag_of(high, offset, committed.get((topic, partition), -1), low)
        if found is not None:
            lag[(topic, partition)] = found
    return lag


def group_lag(consumer: Consumer, topics: Iterable[str], timeout: float = 5.0) -> Lag:
    """The lag of every partition of ``topics`` that ``consumer``'s group (its
    ``group.id``) has committed an offset for (``group_offsets``)."""
    return {tp: lag for tp, (_, lag) in group_offsets(consumer, topics, timeout).items()}


def group_offsets(
    consumer: Consumer, topics: Iterable[str], timeout: float = 5.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """(committed offset, lag) of every partition of ``topics`` that ``consumer``'s
    group (its ``group.id``) has committed an offset for. ``consumer`` only asks: it
    never subscribes, so it does not join the group it measures.

    Not the admin client's ListOffsets: librdkafka aborted the whole process in it
    (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``) when a
    broker died under it, twice in the broker-failover test."""
    metadata = consumer.list_topics(timeout=timeout)
    partitions = [
        TopicPartition(topic, p)
        for topic in topics
        if topic in metadata.topics
        for p in metadata.topics[topic].partitions
    ]
    if not partitions:
        return {}
    found: dict[tuple[str, int], tuple[int, int]] = {}
    for tp in consumer.committed(partitions, timeout=timeout):
        if tp.error is not None or tp.offset < 0:
            continue  # nothing committed there yet
        _, high = consumer.get_watermark_offsets(
            TopicPartition(tp.topic, tp.partition), timeout=timeout, cached=False
        )
        lag = lag_of(high, tp.offset)
        if lag is not None:
            found[(tp.topic, tp.partition)] = (tp.offset, lag)
    return found


@dataclass
class StuckWatch:
    """Partitions a consumer group has stopped reading: messages waiting (lag above
    0) at every look for ``after`` seconds while the group's committed offset has not
    moved. A group that reads slowly still moves its offset; one whose consumer
    stopped fetching a partition after a rebalance does not (faust-streaming's
    aiokafka consumer does that now and then: "has not sent fetch request for TP
    since start", faust-streaming/faust#629)."""

    after: float
    _since: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    """Per partition with lag: its committed offset, and since when it has been."""

    def observe(
        self, now: float, offsets: Mapping[tuple[str, int], tuple[int, int]]
    ) -> list[tuple[str, int]]:
        """Take one look (``group_offsets``); the partitions stuck for ``after``
        seconds or more."""
        since: dict[tuple[str, int], tuple[int, float]] = {}
        for tp, (committed, lag) in offsets.items():
            if lag <= 0:
                continue
            before = self._since.get(tp)
            first = before[1] if before is not None and before[0] == committed else now
            since[tp] = (committed, first)
        self._since = since
        return sorted(tp for tp, (_, first) in since.items() if now - first >= self.after)

    def reset(self) -> None:
        """Forget what was seen (a new consumer starts with a clean slate)."""
        self._since = {}


def report_lag(service: str, lag: Lag, reported: Iterable[tuple[str, int]]) -> None:
    """Report ``lag`` to the sensors, with the partitions ``reported`` before that
    are no longer assigned (another member has them now)."""
    sensors().consumer_lag(service, lag, set(reported) - set(lag))
