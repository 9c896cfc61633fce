"""The tiered policy (issue 15) on made-up units and file lists: when a unit folds,
how many runs merge, and the plan that leaves other units alone."""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firn.engine.policies import plan
from firn.engine.policies.tiered_runs import runs
from firn.errors import ConfigError
from firn.model.files import DeletionVector, FileEntry
from firn.model.plans import PlanDraft
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.model.tiering import (
    COALESCE_FAN_IN,
    Run,
    Unit,
    UnitPlan,
    coalesce_windows,
    fold_reasons,
    kept_by_vector,
    laid_out,
    plan_unit,
    runs_to_merge,
    schema_step,
)
from firn.model.tree import Node
from firn.model.windows import Window

TABLE = TableSchema.build("t", pa.schema([pa.field("id", pa.int64(), False)]), ["id"])
_ids = itertools.count(1)
MiB = 1 << 20


def props(**values: object) -> TableProperties:
    # Toy sizes below the public bounds, set without validation (as test_planner does);
    # every toy partition is under the default base.split-bytes, so the tests of the
    # hash tree lay it out at base.buckets unless they name the threshold, and under the
    # default major.change-bytes-lowest, so the rules fold it as soon as the ratio says
    # (and merge at 5 runs) unless a test names its floor and trigger.
    toy = {"base_split_bytes": 0, "major_change_bytes_lowest": 0, "minor_file_count": 5}
    return TableProperties().model_copy(update={**toy, **values})


def run(seq: int, size: int, deletes: int = 0) -> Run:
    return Run(seq, size, deletes)


def test_fold_rules_are_the_spec_major_rules_on_the_unit() -> None:
    p = props(major_change_ratio=0.5, major_delete_bytes=100 * MiB)
    assert fold_reasons(Unit((run(3, 40), run(2, 40)), base_bytes=200), p) == []
    assert fold_reasons(Unit((run(3, 60), run(2, 40)), base_bytes=200), p) == [
        "change ratio 0.500 >= 0.5"
    ]
    # Thresholds are per node: a unit over two base nodes needs twice the delete bytes.
    many_deletes = Unit((run(2, 0, 150 * MiB),), base_bytes=10**12)
    assert "delete bytes" in fold_reasons(many_deletes, p)[0]
    assert fold_reasons(Unit(many_deletes.runs, 10**12, nodes=2), p) == []
    assert fold_reasons(Unit((), base_bytes=0), p) == []


def test_a_change_floor_keeps_a_small_units_few_runs_until_the_run_trigger() -> None:
    p = props(major_change_bytes_lowest=1000)
    small = Unit((run(3, 60), run(2, 40)), base_bytes=200, nodes=2)  # ratio 0.5, 100 < 2000
    assert fold_reasons(small, p) == []
    assert plan_unit(small, p) is None, "below the run trigger: not even a merge"
    five = Unit(tuple(run(seq, 20) for seq in range(7, 2, -1)), base_bytes=200, nodes=2)
    assert fold_reasons(five, p) == ["change ratio 0.500 >= 0.3"]
    assert plan_unit(five, p) == UnitPlan(True, 0, ("change ratio 0.500 >= 0.3",)), "not a merge"
    big = Unit((run(3, 2000),), base_bytes=4000, nodes=2)
    assert fold_reasons(big, p) == ["change ratio 0.500 >= 0.3"]
    assert fold_reasons(small, props()) == ["change ratio 0.500 >= 0.3"], "no floor at 0"


def test_no_merge_below_the_trigger_and_enough_runs_to_get_back_to_it() -> None:
    p = props(minor_file_count=4, minor_size_ratio=0.0)
    assert runs_to_merge([run(s, 10) for s in (4, 3, 2)], p) == 0
    # Four runs of growing age and size: the newest alone is not worth a merge.
    assert runs_to_merge([run(4, 1), run(3, 10), run(2, 100), run(1, 1000)], p) == 0
    # Six runs: at least three merge so that four are left.
    growing = [run(6, 1), run(5, 2), run(4, 4), run(3, 100), run(2, 100), run(1, 1000)]
    assert runs_to_merge(growing, p) == 3


def test_older_runs_join_while_they_are_no_larger_than_the_merge() -> None:
    p = props(minor_file_count=4, minor_size_ratio=0.0)
    similar = [run(5, 10), run(4, 10), run(3, 20), run(2, 40), run(1, 1000)]
    # 10 + 10 = 20 takes the 20, then 40 takes the 40; 1000 is too big.
    assert runs_to_merge(similar, p) == 4
    loose = props(minor_file_count=4, minor_size_ratio=100.0)
    assert runs_to_merge(similar, loose) == 5


def test_a_unit_without_base_folds_instead_of_merging() -> None:
    p = props(minor_file_count=2, major_change_ratio=10.0)
    decided = plan_unit(Unit((run(3, 10), run(2, 10)), base_bytes=0), p)
    assert decided is not None
    assert decided.fold
    with_base = plan_unit(Unit((run(3, 10), run(2, 10)), base_bytes=10**6), p)
    assert with_base is not None
    assert not with_base.fold
    assert with_base.merge == 2


@settings(deadline=None)  # pure and fast, but these machines are shared
@given(st.lists(st.integers(1, 10**6), max_size=30), st.integers(1, 8), st.floats(0, 3))
def test_a_merge_leaves_at_most_the_trigger_count_of_runs(
    sizes: list[int], trigger: int, ratio: float
) -> None:
    p = props(minor_file_count=trigger, minor_size_ratio=ratio)
    newest_first = [run(len(sizes) - n, size) for n, size in enumerate(sizes)]
    merged = runs_to_merge(newest_first, p)
    assert merged == 0 or 2 <= merged <= len(sizes)
    left = len(sizes) - merged + (1 if merged else 0)
    if len(sizes) > trigger:
        assert left <= trigger


# --- the plan over a partition ---------------------------------------------------


def change(
    node: Node, seq: int, size: int = 100, file_type: str = "I", lo: int = 0, hi: int = 1000
) -> FileEntry:
    path = f"c{next(_ids)}"
    return FileEntry(
        next(_ids), "", "change", file_type, node, seq, path, size, 10, [lo], [hi], seq
    )


def base(node: Node, size: int = 1000, lo: int = 0, hi: int = 1000) -> FileEntry:
    return FileEntry(
        next(_ids), "", "base", "B", node, 1, f"b{next(_ids)}", size, 10, [lo], [hi], 1
    )


def tiered(files: list[FileEntry], kind: str = "minor", **p: object) -> PlanDraft | None:
    return plan(TABLE, props(**p), "", 0, files, kind, scope="due")


def test_runs_are_the_change_files_of_one_seq_newest_first() -> None:
    node = Node(2, 0)
    files = [change(node, 2), change(node, 2, 30, "D"), change(node, 5, 7)]
    assert runs(files) == (Run(5, 7, 0), Run(2, 100, 30))


def test_only_the_due_unit_folds_and_the_others_are_not_rewritten() -> None:
    hot, cold = Node(2, 0), Node(2, 1)
    hot_base, cold_base = base(hot), base(cold)
    files = [hot_base, cold_base, change(hot, 2, 400), change(cold, 2, 10)]
    draft = tiered(files, base_buckets=2, major_change_ratio=0.3)
    assert draft is not None
    assert draft.kind == "major"
    assert {t.node for t in draft.tasks} == {hot}
    assert all(t.kind == "major" for t in draft.tasks)
    assert draft.tasks[0].base_files == (hot_base,)


def test_a_unit_with_many_small_runs_merges_its_newest_ones() -> None:
    node = Node(1, 0)
    files = [base(node, 10**6), *(change(node, s, 10) for s in range(2, 9))]
    draft = tiered(files, base_buckets=1, minor_file_count=5)
    assert draft is not None
    assert draft.kind == "minor"
    (task,) = draft.tasks
    assert task.kind == "minor"
    assert task.base_files == ()
    # Seven equal runs: all merge (each older one is no larger than the merge so far).
    assert {f.seq for f in task.change_files} == set(range(2, 9))


def test_a_minor_request_with_nothing_due_plans_nothing_and_a_major_folds_all() -> None:
    a, b = Node(2, 0), Node(2, 1)
    files = [base(a), base(b), change(a, 2, 10), change(b, 3, 10)]
    assert tiered(files, base_buckets=2) is None
    draft = tiered(files, "major", base_buckets=2)
    assert draft is not None
    assert {t.node for t in draft.tasks} == {a, b}
    assert draft.to_seq == 3


def test_units_follow_the_shallowest_file() -> None:
    # A change file written when change.buckets was 1 spans both base nodes: the unit
    # is the root, and its fold covers both.
    files = [base(Node(2, 0)), base(Node(2, 1)), change(Node(1, 0), 2, 2000)]
    draft = tiered(files, base_buckets=2, major_change_ratio=0.3)
    assert draft is not None
    assert {t.node for t in draft.tasks} == {Node(2, 0), Node(2, 1)}


def test_a_full_request_rebuckets_misplaced_base_a_bounded_step_at_a_time() -> None:
    # base.buckets went from 2 to 4: two old base files of 300 bytes, one per unit.
    old = [base(Node(2, 0), 300), base(Node(2, 1), 300)]
    placed = base(Node(4, 0), 300)
    step = tiered([*old, placed], "full", base_buckets=4, task_max_bytes=50)
    assert step is not None
    assert step.kind == "full"
    # 4 x 50 bytes a step: the first unit (2,0) alone, rewritten whole (with the base
    # file already at level 4 inside it) into its nodes at level 4.
    assert {t.node for t in step.tasks} == {Node(4, 0), Node(4, 2)}
    rewritten = {f.file_id for t in step.tasks for f in t.base_files}
    assert rewritten == {old[0].file_id, placed.file_id}
    assert all(t.kind == "full" for t in step.tasks)
    whole = tiered([*old, placed], "full", base_buckets=4, task_max_bytes=10**6)
    assert whole is not None
    every = {f.file_id for f in (*old, placed)}
    assert {f.file_id for t in whole.tasks for f in t.base_files} == every
    assert tiered([placed], "full", base_buckets=4) is None, "nothing misplaced"


def test_keys_in_order_fold_as_they_come_without_rewriting_older_base() -> None:
    node = Node(1, 0)
    old = base(node, 10**6, 0, 1000)
    # Runs past the end of the base: a fold rewrites no base, so it costs what a merge
    # would and is chosen instead, however small the runs are next to the base.
    appended = [change(node, s, 10, lo=1000 + 10 * s, hi=1009 + 10 * s) for s in range(2, 7)]
    draft = tiered([old, *appended], base_buckets=1, minor_file_count=5)
    assert draft is not None
    assert draft.kind == "major"
    assert all(t.base_files == () for t in draft.tasks)
    assert draft.untouched_base_files == (old,)
    # The same runs over the base's own keys merge among themselves instead.
    updates = [change(node, s, 10, lo=10 * s, hi=10 * s + 9) for s in range(2, 7)]
    merged = tiered([old, *updates], base_buckets=1, minor_file_count=5)
    assert merged is not None
    assert merged.kind == "minor"


def test_base_files_a_deletion_vector_is_sure_to_cover_do_not_count_as_rewritten() -> None:
    node = Node(1, 0)
    large = replace(base(node, 2 * MiB), record_count=10_000)
    # Five runs of 10 rows over the base's keys: at most 50 of its 10,000 rows hidden,
    # far under the 0.3 ratio, so the fold keeps the file and costs what a merge does.
    updates = [change(node, s, 10, lo=10 * s, hi=10 * s + 9) for s in range(2, 7)]
    on = dict(base_buckets=1, minor_file_count=5, small_file_bytes=MiB)
    folded = tiered([large, *updates], **on)
    assert folded is not None
    assert folded.kind == "major"
    assert folded.tasks[0].base_files == (large,), "the executor still decides per file"
    # Vectors off: the file would be rewritten, so the runs merge among themselves.
    merged = tiered([large, *updates], **on, deletion_vector_ratio=0.0)
    assert merged is not None
    assert merged.kind == "minor"
    # A file whose vector could pass the ratio counts as rewritten...
    nearly = replace(large, deletion_vector=DeletionVector("dv", 100, 2_960))
    assert kept_by_vector(large, 50, 1, props(**on))
    assert not kept_by_vector(nearly, 50, 1, props(**on))
    assert (d := tiered([nearly, *updates], **on)) is not None
    assert d.kind == "minor"
    # ...and so does a tiny file or one at a shallower level, which folds rewrite.
    tiny = props(**{**on, "deletion_vector_min_bytes": 4 * MiB})
    assert not kept_by_vector(large, 50, 1, tiny)
    assert not kept_by_vector(large, 50, 2, props(**on))


def test_only_the_rows_of_spans_meeting_a_file_count_against_its_vector() -> None:
    # An event log: runs of 4,000 rows each, one late update among them in the base's
    # range, the rest past it. All 20,000 rows could land in the 10,000-row file as far
    # as the ranges say; the spans say one row a run does.
    node = Node(1, 0)
    large = replace(base(node, 2 * MiB, 0, 1000), record_count=10_000)
    runs_ = [
        replace(
            change(node, s, 10_000, lo=10 * s, hi=5000 + s),
            record_count=4_000,
            key_spans=[[[10 * s], [10 * s], 1], [[2000 + s], [5000 + s], 3_999]],
        )
        for s in range(2, 7)
    ]
    on = dict(base_buckets=1, minor_file_count=5, small_file_bytes=MiB)
    folded = tiered([large, *runs_], **on)
    assert folded is not None
    assert folded.kind == "major", "five rows at most: the vector keeps the file"
    unknown = [replace(r, key_spans=None) for r in runs_]
    merged = tiered([large, *unknown], **on)
    assert merged is not None
    assert merged.kind == "minor", "20,000 rows could hide more than 30 % of it"


def test_the_window_parses_runs_past_midnight_and_takes_a_zone() -> None:
    night = Window.parse("22:00-04:00")
    at = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    assert night.contains(at.replace(hour=23))
    assert night.contains(at.replace(hour=3))
    assert not night.contains(at.replace(hour=4))
    assert not night.contains(at.replace(hour=12))
    paris = Window.parse("01:00-05:00 Europe/Paris")  # UTC+1 in November
    assert paris.contains(at.replace(hour=0))
    assert not paris.contains(at.replace(hour=4, minute=30))
    assert str(paris) == "01:00-05:00 Europe/Paris"
    for bad in ("1:00-5:00", "01:00-01:00", "24:00-01:00", "01:00-05:00 Mars/Olympus"):
        with pytest.raises(ConfigError):
            Window.parse(bad)
    with pytest.raises(ConfigError, match=r"compaction\.major-window"):
        TableProperties.parse({"compaction.major-window": "nightly"})


def test_outside_the_window_units_merge_instead_of_folding_unless_stalled() -> None:
    node = Node(1, 0)
    due = [base(node, 1000), *(change(node, s, 400) for s in range(2, 8))]  # fold due
    night = {"compaction.major-window": "01:00-05:00", "write.stall-runs": 7}
    at = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    p = {"base_buckets": 1, "minor_file_count": 5, "major_window": "01:00-05:00"}
    inside = plan(TABLE, props(**p), "", 0, due, "major", now=at.replace(hour=3), scope="due")
    assert inside is not None
    assert inside.kind == "major"
    outside = plan(TABLE, props(**p), "", 0, due, "major", now=at.replace(hour=12), scope="due")
    assert outside is not None
    assert outside.kind == "minor", "six runs of a unit due to fold: merged instead"
    few = due[:3]  # two runs: nothing to merge, and the fold waits for the window
    assert (
        plan(TABLE, props(**p), "", 0, few, "major", now=at.replace(hour=12), scope="due") is None
    )
    stalled = plan(
        TABLE,
        props(**p, write_stall_runs=6),
        "",
        0,
        due,
        "major",
        now=at.replace(hour=12),
        scope="due",
    )
    assert stalled is not None
    assert stalled.kind == "major", "at the stall limit reads come first"
    assert TableProperties.parse(night).window == Window.parse("01:00-05:00")


def test_small_base_files_past_the_rule_are_coalesced_changes_or_not() -> None:
    # Folds leave untouched base files as they are, so small ones add up: with none
    # left to fold, a major request still merges each unit's neighbouring small files,
    # and the large file after them stays as it is.
    crowded, tidy = Node(2, 0), Node(2, 1)
    small = [base(crowded, 10, 10 * i, 10 * i + 9) for i in range(5)]
    large = base(crowded, 10**6, 100, 2000)
    alone = base(tidy, 10, 0, 9)
    files = [*small, large, alone]
    p = {"base_buckets": 2, "major_file_count": 2, "target_file_size": 8000}
    draft = tiered(files, "major", **p)
    assert draft is not None
    assert draft.kind == "major"
    assert draft.from_merged_seq == draft.to_seq == 0, "no change is merged"
    assert {t.node for t in draft.tasks} == {crowded}, "one small file is nothing to merge"
    rewritten = {f.file_id for t in draft.tasks for f in t.base_files}
    assert rewritten == {f.file_id for f in small}, "the small files, not the large one"
    assert {i for t in draft.tasks for i in t.rewrite} == rewritten, "none may be kept"
    assert all(t.change_files == () and t.cut_before == () for t in draft.tasks)
    # Below the rule (2 per node: 4 here), and on a minor request, nothing is planned.
    assert tiered([*small[:2], large, alone], "major", **p) is None
    assert tiered(files, "minor", **p) is None
    # Outside the off-peak window the rewrite waits, as folds do.
    at = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC)
    night = props(**p, major_window="01:00-05:00")
    assert plan(TABLE, night, "", 0, files, "major", now=at, scope="due") is None


def test_small_files_between_large_ones_are_rewritten_whole_with_them_at_twice_the_rule() -> None:
    # No two small files are neighbours: only rewriting the unit whole merges them,
    # which waits for twice the rule's count (2 a node here), so that a unit whose
    # windows are only not yet full is not rewritten whole.
    node = Node(1, 0)
    files = [base(node, 10**6, 0, 9)]
    for i in range(1, 5):
        files += [
            base(node, 10, 100 * i, 100 * i + 9),
            base(node, 10**6, 100 * i + 10, 100 * i + 99),
        ]
    p = {"base_buckets": 1, "major_file_count": 2, "target_file_size": 8000}
    draft = tiered(files, "major", **p)
    assert draft is not None
    rewritten = {f.file_id for t in draft.tasks for f in t.base_files}
    assert rewritten == {f.file_id for f in files}
    assert {i for t in draft.tasks for i in t.rewrite} == rewritten
    # Three small files pass the rule (2) but not twice it: nothing yet.
    assert tiered(files[:-2], "major", **p) is None


def test_a_unit_that_folds_coalesces_inside_its_fold_and_one_that_merges_beside_it() -> None:
    folding, merging = Node(2, 0), Node(2, 1)
    p = {
        "base_buckets": 2,
        "major_file_count": 2,
        "major_change_ratio": 0.3,
        "minor_file_count": 3,
        "target_file_size": 8000,
    }
    tail = [base(folding, 10, 10 * i, 10 * i + 9) for i in range(4)]
    appended = change(folding, 2, 400, lo=100, hi=199)  # past the tail: touches no base
    fold = tiered([*tail, appended], "major", **p)
    assert fold is not None
    (task,) = fold.tasks
    assert task.kind == "major"
    assert task.change_files == (appended,)
    ids = {f.file_id for f in task.base_files}
    assert ids == {f.file_id for f in tail}, "untouched by the change, coalesced anyway"
    assert set(task.rewrite) == {f.file_id for f in tail}
    assert fold.untouched_base_files == ()

    large = base(merging, 10**6, 1000, 2000)
    runs_over_large = [change(merging, s, 10, lo=1000, hi=2000) for s in range(3, 6)]
    mixed = tiered([*tail, appended, large, *runs_over_large], "minor", **p)
    assert mixed is not None
    by_kind = {t.kind: t for t in mixed.tasks if t.node == merging}
    assert set(by_kind) == {"minor"}, "a minor request coalesces nothing"
    # Node 0 folds on its deletes; node 1's runs are only due to merge.
    deletes = change(folding, 2, 400, "D", lo=0, hi=9)
    mixed = tiered(
        [*tail, deletes, large, *runs_over_large, *(base(merging, 10, i, i) for i in range(4))],
        "major",
        **{**p, "major_change_ratio": 1000, "major_delete_bytes": 100},
    )
    assert mixed is not None
    kinds = sorted((t.kind, len(t.base_files), len(t.change_files)) for t in mixed.tasks)
    # Node 0 folds its deletes into its four small files; node 1 merges its runs in
    # one task and coalesces its four small files (not the large one) in another.
    assert kinds == [("major", 4, 0), ("major", 4, 1), ("minor", 0, 3)]


def test_coalesced_windows_grow_an_event_logs_tail_three_fold_or_more() -> None:
    # One large file, then a tail of small ones as folds appended them.
    assert coalesce_windows([100, 1, 1, 1, 1, 1], threshold=50) == [range(1, 6)]
    # A window's largest file is at most a third of it: 12 stays out of 12 + 4.
    assert coalesce_windows([12, 1, 1, 1, 1], threshold=50) == [range(1, 5)]
    assert coalesce_windows([12, 12, 10, 11, 3], threshold=50) == [range(0, 5)]
    assert coalesce_windows([1, 1, 1], threshold=50) == [range(0, 3)]
    assert coalesce_windows([1, 1], threshold=50) == [], "too few to be worth it"
    assert coalesce_windows([21, 19, 20, 18], threshold=50) == [range(0, 4)], "near-equal"
    # Large files split stretches; each stretch has its own windows.
    sizes = [1, 1, 1, 1, 60, 2, 2, 2, 2, 2, 70, 9, 1]
    assert coalesce_windows(sizes, threshold=50) == [range(0, 4), range(5, 10)]


@given(st.lists(st.integers(1, 100), max_size=24), st.integers(2, 120))
@settings(max_examples=300, deadline=None)
def test_coalesced_windows_are_small_neighbours_none_dominates_and_none_is_missed(
    sizes: list[int], threshold: int
) -> None:
    windows = coalesce_windows(sizes, threshold)
    taken = [i for w in windows for i in w]
    assert len(taken) == len(set(taken)), "disjoint"
    for w in windows:
        chosen = [sizes[i] for i in w]
        assert len(chosen) >= 2
        assert all(size < threshold for size in chosen)
        assert max(chosen) * COALESCE_FAN_IN <= sum(chosen)
    # What is left holds no window that qualifies.
    free = [i not in taken for i in range(len(sizes))]
    for a in range(len(sizes)):
        for b in range(a + 2, len(sizes) + 1):
            part = sizes[a:b]
            if all(free[a:b]) and max(part) < threshold:
                assert max(part) * COALESCE_FAN_IN > sum(part), (a, b)


# --- base files of older schema versions ------------------------------------------


def test_old_schema_files_are_rewritten_within_the_budget_oldest_first() -> None:
    node = Node(4, 1)
    files = [
        replace(base(node, 1000, i * 100, i * 100 + 99), schema_id=v)
        for i, v in enumerate([2, 0, 1, 0, 2, 2])
    ]
    step = schema_step(files, 2, 2500)
    # Version 0 first (oldest file first), then version 1 while the budget lasts.
    assert [(f.schema_id, f.file_id) for f in step] == [
        (0, files[1].file_id),
        (0, files[3].file_id),
    ]
    assert len(schema_step(files, 2, 3000)) == 3
    assert schema_step(files, 2, 999) == []  # not one whole file paid for yet
    assert schema_step(files, 0, 10**9) == []  # nothing older than version 0


def test_a_major_plan_rewrites_the_step_whether_or_not_its_unit_folds() -> None:
    evolved = replace(TABLE, schema_id=3)
    quiet, busy = Node(4, 1), Node(4, 2)
    old_quiet = replace(base(quiet), schema_id=1)
    old_busy = replace(base(busy, lo=0, hi=10), schema_id=2)
    current = [replace(base(Node(4, n)), schema_id=3) for n in (0, 3)]
    files = [old_quiet, old_busy, *current, change(busy, 5, lo=500, hi=600)]
    p = props(base_buckets=4, change_buckets=4)
    draft = plan(evolved, p, "", 0, files, "major", schema_budget=2000, scope="due")
    assert draft is not None
    rewritten = {f.file_id for t in draft.tasks for f in t.base_files}
    assert {old_quiet.file_id, old_busy.file_id} <= rewritten
    assert not rewritten & {f.file_id for f in current}
    # Without a budget only what the fold touches is rewritten.
    unpaid = plan(evolved, p, "", 0, files, "major", scope="due")
    assert unpaid is not None
    assert old_quiet.file_id not in {f.file_id for t in unpaid.tasks for f in t.base_files}
    # A minor request leaves the base alone.
    minor = plan(evolved, p, "", 0, files, "minor", schema_budget=2000, scope="due")
    assert minor is None or not any(t.base_files for t in minor.tasks)


# --- small partitions at the root (base.split-bytes) --------------------------------


def test_a_small_partition_folds_at_the_root_in_one_task() -> None:
    """Below ``base.split-bytes`` a partition is planned as if ``base.buckets`` were 1:
    one task at the root folds its root change files and its root base file."""
    files = [base(Node(1, 0), size=500), change(Node(1, 0), 2), change(Node(1, 0), 3)]
    draft = tiered(files, "major", base_buckets=4, base_split_bytes=1024)
    assert draft is not None
    assert [t.node for t in draft.tasks] == [Node(1, 0)]
    assert {f.file_id for f in draft.tasks[0].base_files} == {files[0].file_id}

    split = tiered(files, "major", base_buckets=4)
    assert split is not None
    assert sorted(t.node for t in split.tasks) == [Node(4, i) for i in range(4)]


def test_a_partition_past_the_threshold_folds_at_base_buckets() -> None:
    """The fold that takes a partition past ``base.split-bytes`` splits its root base
    file among the nodes of ``base.buckets`` (each task reads it, keeps its rows); one
    whose base is already there stays there, however small."""
    root = base(Node(1, 0), size=900)
    grown = tiered(
        [root, change(Node(1, 0), 2, size=200)],
        "major",
        base_buckets=4,
        base_split_bytes=1024,
    )
    assert grown is not None
    assert sorted(t.node for t in grown.tasks) == [Node(4, i) for i in range(4)]
    assert all(root in t.base_files for t in grown.tasks)

    spread = [base(Node(4, i), size=10) for i in range(4)]
    kept = tiered(
        [*spread, change(Node(1, 0), 2, size=10)],
        "major",
        base_buckets=4,
        base_split_bytes=1024,
    )
    assert kept is not None
    assert sorted(t.node for t in kept.tasks) == [Node(4, i) for i in range(4)]


def test_laid_out_is_the_tables_properties_unless_the_partition_is_small() -> None:
    p = props(base_buckets=8, base_split_bytes=1000)
    assert laid_out(p, [], [change(Node(1, 0), 2, size=999)]).base_buckets == 1
    assert laid_out(p, [], [change(Node(1, 0), 2, size=1000)]).base_buckets == 8
    assert laid_out(p, [base(Node(8, 3), size=1)], []).base_buckets == 8
    assert laid_out(props(base_buckets=8), [], []).base_buckets == 8
