"""One test per design §4 trigger, plus node scaling and the score."""

from __future__ import annotations

from dataclasses import replace

from firn.model.properties import MiB, TableProperties
from firn.model.tasks import Kind
from firn.model.triggers import PartitionMetrics, decide, score

PROPS = TableProperties.parse({"base.buckets": 4})  # n = 4
QUIET = PartitionMetrics(
    unmerged_insert_bytes=1 * MiB,
    unmerged_delete_bytes=0,
    unmerged_files=2,
    base_bytes=100 * MiB,
    base_files=4,
    small_files=2,
    max_runs_per_node=1,
    seconds_since_major=60.0,
)


def test_a_quiet_partition_needs_nothing() -> None:
    assert decide(QUIET, PROPS).kind is None


def test_delete_bytes_scaled_by_nodes() -> None:
    below = replace(QUIET, unmerged_delete_bytes=64 * MiB * 4 - 1, base_bytes=10_000 * MiB)
    assert decide(below, PROPS).kind is None
    at = replace(below, unmerged_delete_bytes=64 * MiB * 4)
    decision = decide(at, PROPS)
    assert decision.kind is Kind.MAJOR
    assert decision.reasons[0].startswith("delete bytes")


def test_delete_ratio_needs_the_lowest_delete_bytes_too() -> None:
    tiny_base = replace(QUIET, base_bytes=1000, unmerged_insert_bytes=0, unmerged_delete_bytes=500)
    # ratio 0.5, but only 500 delete bytes (the change ratio fires here, not this rule)
    assert not any(r.startswith("delete ratio") for r in decide(tiny_base, PROPS).reasons)
    enough = replace(
        QUIET, base_bytes=30 * MiB, unmerged_insert_bytes=0, unmerged_delete_bytes=4 * MiB
    )
    decision = decide(enough, PROPS)
    assert decision.kind is Kind.MAJOR
    assert decision.reasons == ("delete ratio 0.133 >= 0.1",)


def test_change_ratio() -> None:
    at = replace(QUIET, unmerged_insert_bytes=30 * MiB)
    assert any(r.startswith("change ratio") for r in decide(at, PROPS).reasons)
    assert decide(replace(QUIET, unmerged_insert_bytes=29 * MiB), PROPS).kind is None


def test_a_change_floor_lets_a_small_partitions_runs_collect_before_a_fold() -> None:
    floor = PROPS  # the default major.change-bytes-lowest: 64 KiB a node
    eager = TableProperties.parse({"base.buckets": 4, "major.change-bytes-lowest": 0})
    # Two small commits into a small base: ratio 0.5, far below 4 x 64 KiB.
    small = replace(
        QUIET,
        unmerged_insert_bytes=6000,
        unmerged_files=2,
        small_files=3,
        base_bytes=12_000,
        max_runs_per_node=2,
    )
    assert decide(small, eager).reasons == ("change ratio 0.500 >= 0.3",), "no floor: folds"
    assert decide(small, floor).kind is None
    # ... until a node holds minor.file-count (10) runs: then a fold, not a minor merge.
    nine = replace(small, max_runs_per_node=9, unmerged_files=9, unmerged_insert_bytes=27_000)
    assert decide(nine, floor).kind is None
    ten = replace(small, max_runs_per_node=10, unmerged_files=10, unmerged_insert_bytes=30_000)
    assert decide(ten, floor).reasons == ("change ratio 2.500 >= 0.3",)
    # ... or the changes reach the floor.
    big = replace(small, unmerged_insert_bytes=256 * 1024, base_bytes=512 * 1024)
    assert decide(big, floor).kind is Kind.MAJOR
    # A partition never folded waits for the same; one folded before keeps its interval.
    fresh = replace(small, base_bytes=0, seconds_since_major=None)
    assert decide(fresh, eager).kind is Kind.MAJOR
    assert decide(fresh, floor).kind is None
    assert decide(replace(fresh, max_runs_per_node=10), floor).kind is Kind.MAJOR
    # ... or, gone quiet before that, until its oldest change is major.interval-max old.
    waited = replace(fresh, oldest_change_seconds=3599.0)
    assert decide(waited, floor).kind is None
    assert decide(replace(waited, oldest_change_seconds=3600.0), floor).reasons == (
        "unmerged changes 3600s old and last major never (max 3600s)",
    )
    overdue = replace(small, seconds_since_major=3600.0)
    assert decide(overdue, floor).reasons == (
        "unmerged changes and last major 3600s ago (max 3600s)",
    )


def test_small_base_file_count_scaled_by_nodes() -> None:
    # QUIET's two unmerged change files are among its small files.
    assert decide(replace(QUIET, small_files=2 + 12 * 4 - 1), PROPS).kind is None
    decision = decide(replace(QUIET, small_files=2 + 12 * 4), PROPS)
    assert decision.kind is Kind.MAJOR
    assert decision.reasons == ("small base files 48 >= 48",)


def test_small_change_files_are_runs_not_a_reason_to_fold() -> None:
    # 60 small files of which 20 are unmerged change files: 40 small base files.
    many = replace(QUIET, small_files=60, unmerged_files=20, unmerged_insert_bytes=1024)
    assert decide(many, PROPS).kind is None
    assert decide(replace(many, small_files=68), PROPS).kind is Kind.MAJOR


def test_interval_only_with_unmerged_changes() -> None:
    old = replace(QUIET, seconds_since_major=3600.0)
    assert decide(old, PROPS).kind is Kind.MAJOR
    assert decide(replace(old, unmerged_files=0, unmerged_insert_bytes=0), PROPS).kind is None
    assert decide(replace(QUIET, seconds_since_major=None), PROPS).kind is Kind.MAJOR


def test_minor_when_a_node_has_too_many_change_files() -> None:
    assert decide(replace(QUIET, max_runs_per_node=10), PROPS).kind is None
    decision = decide(replace(QUIET, max_runs_per_node=11), PROPS)
    assert decision.kind is Kind.MINOR


def test_score_grows_with_files_and_bytes_and_is_zero_when_merged() -> None:
    assert score(replace(QUIET, unmerged_files=0, unmerged_insert_bytes=0), PROPS) == 0.0
    more_files = replace(QUIET, unmerged_files=8)
    more_bytes = replace(QUIET, unmerged_insert_bytes=50 * MiB)
    assert score(more_files, PROPS) > score(QUIET, PROPS)
    assert score(more_bytes, PROPS) > score(QUIET, PROPS)


def test_base_files_at_another_level_make_a_full_compaction_due() -> None:
    decision = decide(replace(QUIET, misplaced_base_files=3), PROPS)
    assert decision.kind == Kind.FULL
    assert decision.reasons == (f"3 base files not at base.buckets {PROPS.base_buckets}",)
