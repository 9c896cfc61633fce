"""The metrics service's counters against the truth: any order, duplicates and losses
of commit events, interleaved with catalog readings taken at any snapshot, end at the
catalog's numbers once every commit is either delivered or covered by a reading."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from firn.engine.tracking import Increment, Reading, TrackedPartition
from firn.model.properties import TableProperties
from firn.model.triggers import PartitionMetrics


def truth(increments: list[Increment], upto: int) -> PartitionMetrics:
    """The catalog's view at snapshot ``upto`` (no compactions: everything unmerged)."""
    seen = [i for i in increments if i.snapshot_id <= upto]
    files = sum(i.insert_files + i.delete_files for i in seen)
    return PartitionMetrics(
        unmerged_insert_bytes=sum(i.insert_bytes for i in seen),
        unmerged_delete_bytes=sum(i.delete_bytes for i in seen),
        unmerged_files=files,
        base_bytes=0,
        base_files=0,
        small_files=files,
        max_runs_per_node=sum(1 for i in seen if i.insert_files + i.delete_files > 0),
        seconds_since_major=None,
    )


def reading(increments: list[Increment], snapshot: int) -> Reading:
    seqs = [i.seq for i in increments if i.snapshot_id <= snapshot]
    return Reading(snapshot, truth(increments, snapshot), max(seqs, default=0), 0, None)


commits = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 4), st.integers(0, 4)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(commits=commits, data=st.data())
def test_counters_end_at_the_truth(
    commits: list[tuple[int, int, int, int]], data: st.DataObject
) -> None:
    increments = [
        Increment(
            snapshot_id=n, seq=n, insert_bytes=ib, delete_bytes=db, insert_files=f, delete_files=g
        )
        for n, (ib, db, f, g) in enumerate(commits, start=1)
    ]
    last = len(increments)
    events: list[Increment | Reading] = []
    for increment in increments:
        events += [increment] * data.draw(st.integers(0, 2), label="copies")
    for snapshot in data.draw(st.lists(st.integers(0, last), max_size=4), label="readings"):
        events.append(reading(increments, snapshot))
    events = data.draw(st.permutations(events), label="order")
    delivered = {e.snapshot_id for e in events if isinstance(e, Increment)}
    if delivered != set(range(1, last + 1)):
        # A lost event is made good by the next periodic reading.
        events.append(reading(increments, last))

    tracked = TrackedPartition("t", 1, "")
    for event in events:
        if isinstance(event, Increment):
            tracked.apply_commit(event)
        else:
            tracked.apply_reading(event)

    assert tracked.metrics(now=0.0) == truth(increments, last)
    assert tracked.max_seq == last


def test_merged_commits_are_not_counted_again() -> None:
    tracked = TrackedPartition("t", 1, "")
    late = Increment(
        snapshot_id=3, seq=2, insert_bytes=10, delete_bytes=0, insert_files=1, delete_files=0
    )
    merged = PartitionMetrics(0, 0, 0, 500, 1, 1, 0, None)
    tracked.apply_reading(Reading(4, merged, max_seq=2, max_merged_seq=2, last_major_at=100.0))
    assert not tracked.apply_commit(late)
    assert tracked.metrics(now=160.0) == dataclasses.replace(merged, seconds_since_major=60.0)


def test_one_request_until_a_compaction_or_the_resend_time() -> None:
    props = TableProperties.parse({"base.buckets": 1, "minor.file-count": 2})
    tracked = TrackedPartition("t", 1, "", last_major_at=0.0)
    base = PartitionMetrics(0, 0, 0, 10**9, 1, 0, 0, None)
    tracked.apply_reading(Reading(1, base, max_seq=1, max_merged_seq=1, last_major_at=0.0))
    for n in (2, 3):
        tracked.apply_commit(Increment(n, n, 100, 0, 1, 0))
        assert tracked.request(props, now=10.0, resend_after=600) is None  # 2 runs: not > 2
    tracked.apply_commit(Increment(4, 4, 100, 0, 1, 0))
    request = tracked.request(props, now=10.0, resend_after=600)
    assert request is not None
    assert (request.kind, request.max_seq) == ("minor", 4)
    assert request.reasons == ("a node has 3 sorted runs > 2",)
    tracked.apply_commit(Increment(5, 5, 100, 0, 1, 0))
    assert tracked.request(props, now=11.0, resend_after=600) is None  # one is pending
    # A periodic reading with no compaction since: still pending.
    unmerged = PartitionMetrics(400, 0, 4, 10**9, 1, 4, 4, None)
    tracked.apply_reading(Reading(5, unmerged, 5, 1, 0.0, last_plan=0))
    assert tracked.request(props, now=12.0, resend_after=600) is None
    # The plan the partition was busy with commits: still due, so it asks again.
    tracked.apply_reading(Reading(6, unmerged, 5, 1, 0.0, last_plan=7))
    again = tracked.request(props, now=13.0, resend_after=600)
    assert again is not None
    assert again.max_seq == 5
    # Unanswered (lost, or its plan failed): asked again once resend_after has passed.
    assert tracked.request(props, now=612.0, resend_after=600) is None
    assert tracked.request(props, now=613.0, resend_after=600) is not None


def test_a_request_unanswered_is_sent_again_after_minor_file_count_more_commits() -> None:
    # The planner found nothing due (the runs counted here are an upper bound) and
    # answered nothing: new commits, not only time, make the partition worth asking.
    props = TableProperties.parse({"base.buckets": 1, "minor.file-count": 2})
    tracked = TrackedPartition("t", 1, "", last_major_at=0.0)
    base = PartitionMetrics(0, 0, 0, 10**9, 1, 0, 0, None)
    tracked.apply_reading(Reading(1, base, max_seq=1, max_merged_seq=1, last_major_at=0.0))
    for n in (2, 3, 4):
        tracked.apply_commit(Increment(n, n, 100, 0, 1, 0))
    assert tracked.request(props, now=10.0, resend_after=600) is not None
    tracked.apply_commit(Increment(5, 5, 100, 0, 1, 0))
    assert tracked.request(props, now=11.0, resend_after=600) is None  # one newer commit
    tracked.apply_commit(Increment(6, 6, 100, 0, 1, 0))
    again = tracked.request(props, now=12.0, resend_after=600)
    assert again is not None
    assert again.max_seq == 6
    assert tracked.request(props, now=13.0, resend_after=600) is None  # pending again


def test_an_older_reading_is_ignored() -> None:
    tracked = TrackedPartition("t", 1, "")
    new = PartitionMetrics(0, 0, 0, 1000, 1, 0, 0, None)
    old = PartitionMetrics(50, 0, 3, 0, 0, 3, 3, None)
    assert tracked.apply_reading(Reading(9, new, 5, 5, 1.0))
    assert not tracked.apply_reading(Reading(7, old, 4, 0, None))
    assert tracked.metrics(now=1.0).base_bytes == 1000
    assert (tracked.max_merged_seq, tracked.last_major_at) == (5, 1.0)


def test_stored_form_round_trips_through_json() -> None:
    tracked = TrackedPartition("t", 7, "day=1", last_major_at=5.5)
    tracked.apply_commit(Increment(2, 2, 1, 2, 1, 1))
    tracked.requested_at = 9.0
    tracked.last_plan = 3
    assert TrackedPartition.from_dict(json.loads(json.dumps(tracked.as_dict()))) == tracked


def test_a_partition_never_folded_is_due_once_its_oldest_change_is_interval_max_old() -> None:
    # Below major.change-bytes-lowest and minor.file-count, a partition never folded
    # waits for more runs; one that goes quiet folds once its first change is old.
    props = TableProperties.parse(
        {"base.buckets": 1, "major.change-bytes-lowest": "64KiB", "major.interval-max": 600}
    )
    tracked = TrackedPartition("t", 1, "")
    tracked.apply_commit(Increment(1, 1, 100, 0, 1, 0, committed_at=1000.0))
    tracked.apply_commit(Increment(2, 2, 100, 0, 1, 0, committed_at=1300.0))
    assert tracked.metrics(now=1500.0).oldest_change_seconds == 500.0
    assert tracked.request(props, now=1599.0, resend_after=60) is None
    due = tracked.request(props, now=1600.0, resend_after=60)
    assert due is not None
    assert due.reasons == ("unmerged changes 600s old and last major never (max 600s)",)
    # A reading takes over: its oldest change is the catalog's, the increments it
    # covers are dropped, and newer ones do not make the partition look younger.
    unmerged = PartitionMetrics(200, 0, 2, 0, 0, 2, 2, None)
    tracked.apply_reading(
        Reading(
            2, unmerged, max_seq=2, max_merged_seq=0, last_major_at=None, oldest_change_at=990.0
        )
    )
    tracked.apply_commit(Increment(3, 3, 100, 0, 1, 0, committed_at=1650.0))
    assert tracked.metrics(now=1700.0).oldest_change_seconds == 710.0
    # Folded: nothing unmerged in the reading, so only the newer commit's age counts.
    folded = PartitionMetrics(0, 0, 0, 300, 1, 1, 0, None)
    tracked.apply_reading(
        Reading(4, folded, max_seq=3, max_merged_seq=2, last_major_at=1690.0, oldest_change_at=None)
    )
    assert tracked.metrics(now=1700.0).oldest_change_seconds is None
    tracked.apply_commit(Increment(5, 4, 100, 0, 1, 0, committed_at=1695.0))
    assert tracked.metrics(now=1700.0).oldest_change_seconds == 5.0
