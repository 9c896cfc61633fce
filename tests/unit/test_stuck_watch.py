"""``StuckWatch``: which partitions a consumer group has stopped reading (messages
waiting, committed offset standing still), as the metrics service's heartbeat asks."""

from __future__ import annotations

from firn.kafka.lag import StuckWatch

COMMITS = ("commits", 2)
OTHER = ("commits", 0)


def test_a_partition_with_messages_waiting_and_a_still_offset_is_stuck_after_the_limit() -> None:
    watch = StuckWatch(after=60)
    assert watch.observe(0, {COMMITS: (100, 268)}) == []
    assert watch.observe(30, {COMMITS: (100, 268)}) == []
    assert watch.observe(59.9, {COMMITS: (100, 300)}) == [], "not yet"
    assert watch.observe(60, {COMMITS: (100, 300), OTHER: (5, 0)}) == [COMMITS]


def test_a_moving_offset_is_not_stuck_however_far_behind() -> None:
    watch = StuckWatch(after=60)
    for t, offset in enumerate(range(100, 2000, 10)):
        # Reading slower than the messages come: the lag grows, the offset moves.
        assert watch.observe(t * 10.0, {COMMITS: (offset, 500 + t * 50)}) == []


def test_a_partition_read_to_its_end_starts_over() -> None:
    watch = StuckWatch(after=60)
    watch.observe(0, {COMMITS: (100, 5)})
    watch.observe(50, {COMMITS: (100, 0)})  # caught up: nothing waiting
    assert watch.observe(70, {COMMITS: (100, 3)}) == [], "waiting again only since 70"
    assert watch.observe(130, {COMMITS: (100, 3)}) == [COMMITS]


def test_a_partition_no_longer_reported_and_a_reset_are_forgotten() -> None:
    watch = StuckWatch(after=60)
    watch.observe(0, {COMMITS: (100, 5)})
    watch.observe(30, {})  # the group committed nothing readable this time
    assert watch.observe(70, {COMMITS: (100, 5)}) == []
    watch.reset()
    assert watch.observe(130, {COMMITS: (100, 5)}) == [], "a new worker gets the whole limit"
    assert watch.observe(190, {COMMITS: (100, 5)}) == [COMMITS]
