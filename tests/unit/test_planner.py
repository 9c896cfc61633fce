"""The planner (design §5) on synthetic file lists: projection, completeness,
incremental merge, key-range splits, full and bin-pack plans."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from firn.engine import policies
from firn.model.files import FileEntry
from firn.model.plans import PlanDraft
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.model.tree import Node

TABLE = TableSchema.build("t", pa.schema([pa.field("id", pa.int64(), False)]), ["id"])
UNKEYED = TableSchema.build("u", pa.schema([pa.field("line", pa.string())]), [])
_ids = itertools.count(1)


def change(node: Node, seq: int, lo: int = 0, hi: int = 1000, size: int = 100) -> FileEntry:
    return FileEntry(next(_ids), "", "change", "I", node, seq, f"c{seq}", size, 10, [lo], [hi], seq)


def base(node: Node, lo: int, hi: int, size: int = 100) -> FileEntry:
    return FileEntry(next(_ids), "", "base", "B", node, 1, f"b{lo}", size, 10, [lo], [hi], 1)


def props(**values: object) -> TableProperties:
    # The planner's rules at toy sizes (100-byte files, a 500-byte task), below the
    # public bounds of TableProperties, so the values are set without validation. Every
    # toy partition is under the default base.split-bytes: laid out at base.buckets.
    return TableProperties().model_copy(update={"base_split_bytes": 0, **values})


def plan(files: list[FileEntry], merged: int = 0, kind: str = "major", **p: object) -> PlanDraft:
    draft = policies.plan(TABLE, props(**p), "", merged, files, kind)
    assert draft is not None
    return draft


def test_files_project_onto_the_base_write_level() -> None:
    deep = plan([change(Node(8, 5), 2)], base_buckets=2)
    assert [t.node for t in deep.tasks] == [Node(2, 1)]
    shallow = plan([change(Node(1, 0), 2)], base_buckets=4)
    assert [t.node for t in shallow.tasks] == [Node(4, i) for i in range(4)]
    assert deep.to_seq == 2
    assert deep.from_merged_seq == 0


def test_a_shallower_base_file_brings_every_node_under_it() -> None:
    wide = base(Node(1, 0), 0, 1000)
    draft = plan([wide, change(Node(2, 0), 3)], base_buckets=2)
    assert [t.node for t in draft.tasks] == [Node(2, 0), Node(2, 1)]
    assert all(t.base_files == (wide,) for t in draft.tasks)
    assert draft.tasks[1].change_files == ()


def test_base_files_no_change_touches_stay_untouched() -> None:
    files = [base(Node(1, 0), 0, 99), base(Node(1, 0), 100, 199), base(Node(1, 0), 200, 299)]
    draft = plan([*files, change(Node(1, 0), 5, 120, 130)], base_buckets=1)
    assert [t.base_files for t in draft.tasks] == [(files[1],)]
    assert draft.untouched_base_files == (files[0], files[2])
    # A change range spanning two files joins them (and anything chained to them).
    draft = plan([*files, change(Node(1, 0), 5, 150, 210)], base_buckets=1)
    assert draft.tasks[0].base_files == (files[1], files[2])


def test_a_change_files_key_spans_touch_only_the_files_they_meet() -> None:
    # An event log's commit: a late update at 50 and new keys past the base. Its range
    # spans every base file; its spans meet only the first.
    files = [base(Node(1, 0), 0, 99), base(Node(1, 0), 100, 199), base(Node(1, 0), 200, 299)]
    log = replace(change(Node(1, 0), 5, 50, 420), key_spans=[[[50], [50], 1], [[300], [420], 9]])
    draft = plan([*files, log], base_buckets=1)
    assert [t.base_files for t in draft.tasks] == [(files[0],)]
    assert draft.untouched_base_files == (files[1], files[2])
    assert draft.tasks[0].cut_before == ([100], [200]), "outputs stop before kept files"
    # Without spans the range stands: every file is read.
    draft = plan([*files, replace(log, key_spans=None)], base_buckets=1)
    assert draft.tasks[0].base_files == tuple(files)


def test_merged_change_files_are_not_inputs() -> None:
    old, new = change(Node(1, 0), 3), change(Node(1, 0), 4)
    draft = plan([old, new], merged=3, base_buckets=1)
    assert draft.tasks[0].change_files == (new,)
    assert policies.plan(TABLE, props(), "", 4, [old, new]) is None


def test_a_big_node_splits_between_base_files_by_key_range() -> None:
    files = [base(Node(1, 0), 100 * i, 100 * i + 99, size=200) for i in range(6)]
    draft = plan(
        [*files, change(Node(1, 0), 9, 0, 599, size=60)], base_buckets=1, task_max_bytes=500
    )
    assert len(draft.tasks) == 3
    assert [t.lower for t in draft.tasks] == [None, [200], [400]]
    assert [t.upper for t in draft.tasks] == [[200], [400], None]
    assert [f for t in draft.tasks for f in t.base_files] == files
    assert all(len(t.change_files) == 1 for t in draft.tasks)
    # A change file is listed only by the range tasks its key range meets.
    wide, narrow = change(Node(1, 0), 9, 0, 599, size=60), change(Node(1, 0), 10, 250, 260, 1)
    draft = plan([*files, wide, narrow], base_buckets=1, task_max_bytes=500)
    assert [t.change_files for t in draft.tasks] == [(wide,), (wide, narrow), (wide,)]


def test_overlapping_base_files_are_never_split_apart() -> None:
    files = [
        base(Node(1, 0), 0, 150, 300),
        base(Node(2, 1), 100, 250, 300),
        base(Node(1, 0), 300, 400, 300),
    ]
    draft = plan([*files, change(Node(1, 0), 9, 0, 400)], base_buckets=1, task_max_bytes=400)
    assert [t.base_files for t in draft.tasks] == [(files[0], files[1]), (files[2],)]


def test_full_rewrites_every_base_file_even_without_changes() -> None:
    files = [base(Node(2, 0), 0, 10), base(Node(2, 1), 0, 10)]
    assert policies.plan(TABLE, props(), "", 0, files) is None
    draft = plan(files, kind="full", base_buckets=4)
    assert [t.node for t in draft.tasks] == [Node(4, i) for i in range(4)]
    assert sorted(f.file_id for t in draft.tasks for f in t.base_files) == sorted(
        [files[0].file_id] * 2 + [files[1].file_id] * 2
    )


def test_unkeyed_tables_bin_pack_changes_and_small_base_files() -> None:
    small, big = base(Node(1, 0), 0, 0, 10), base(Node(1, 0), 0, 0, 10**9)
    changes = [change(Node(1, 0), s, size=300) for s in (2, 3, 4)]
    files = [small, big, *changes]
    draft = policies.plan(UNKEYED, props(task_max_bytes=700), "", 1, files, "major")
    assert draft is not None
    assert draft.kind == "bin-pack"
    packed = [f for t in draft.tasks for f in (*t.base_files, *t.change_files)]
    assert sorted(f.file_id for f in packed) == sorted(f.file_id for f in [small, *changes])
    assert all(t.input_bytes <= 700 for t in draft.tasks)


def test_a_full_compaction_of_an_unkeyed_table_repacks_every_file() -> None:
    small, big = base(Node(1, 0), 0, 0, 10), base(Node(1, 0), 0, 0, 10**9)
    for scope in ("all", "due"):
        draft = policies.plan(UNKEYED, props(), "", 1, [small, big], "full", scope=scope)
        assert draft is not None
        assert draft.kind == "bin-pack"
        packed = {f.file_id for t in draft.tasks for f in t.base_files}
        assert packed == {small.file_id, big.file_id}, scope
    # A major leaves the large file alone: one small file is nothing to pack.
    assert policies.plan(UNKEYED, props(), "", 1, [small, big], "major") is None


levels = st.sampled_from([1, 2, 4, 8])


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[FileEntry], int]:
    files = []
    for _ in range(draw(st.integers(0, 6))):
        m = draw(levels)
        lo = draw(st.integers(0, 90))
        files.append(base(Node(m, draw(st.integers(0, m - 1))), lo, lo + draw(st.integers(0, 20))))
    for seq in range(2, 2 + draw(st.integers(1, 6))):
        m = draw(levels)
        lo = draw(st.integers(0, 90))
        node = Node(m, draw(st.integers(0, m - 1)))
        files.append(change(node, seq, lo, lo + draw(st.integers(0, 20))))
    return files, draw(levels)


@given(partitions())
def test_every_change_reaches_every_node_it_projects_to_and_base_files_go_whole(
    case: tuple[list[FileEntry], int],
) -> None:
    files, level = case
    draft = plan(files, base_buckets=level)
    tasks_by_node = {t.node: t for t in draft.tasks}
    for f in files:
        projected = f.node.project(level)
        if f.store == "change":
            assert all(f in tasks_by_node[n].change_files for n in projected)
            continue
        readers = [n for n in projected if n in tasks_by_node and f in tasks_by_node[n].base_files]
        # A base file is rewritten whole (every node it projects to reads it) or
        # left alone (no task reads it), never half.
        assert readers in ([], projected)
        assert (f in draft.untouched_base_files) == (
            not readers and any(n in tasks_by_node for n in projected)
        )


def deletes(node: Node, seq: int, lo: int, hi: int) -> FileEntry:
    return FileEntry(next(_ids), "", "change", "D", node, seq, f"d{seq}", 100, 10, [lo], [hi], seq)


def test_a_change_file_overlapping_nothing_is_moved_and_outputs_are_cut_around_it() -> None:
    old = base(Node(1, 0), 0, 99)
    fresh = change(Node(1, 0), 5, 200, 299)
    late = change(Node(1, 0), 6, 50, 60)
    draft = plan([old, fresh, late], base_buckets=1, small_file_bytes=50)
    moves = [t for t in draft.tasks if t.move]
    folds = [t for t in draft.tasks if not t.move]
    assert [t.change_files for t in moves] == [(fresh,)]
    assert moves[0].base_files == ()
    assert [(t.base_files, t.change_files) for t in folds] == [((old,), (late,))]
    assert folds[0].cut_before == ([200],), "no output may span the moved file"


def test_small_overlapping_deleted_or_shallower_files_are_not_moved() -> None:
    level = {"base_buckets": 2, "small_file_bytes": 50}
    cases = [
        [change(Node(2, 0), 5, 0, 9, size=40)],  # small
        [change(Node(2, 0), 5, 0, 9), change(Node(2, 0), 6, 5, 20)],  # overlapping changes
        [change(Node(2, 0), 5, 0, 9), deletes(Node(2, 0), 5, 3, 3)],  # its own commit deletes
        [change(Node(2, 0), 5, 0, 9), base(Node(2, 0), 9, 30)],  # overlapping base
        [change(Node(1, 0), 5, 0, 9)],  # at another level than the node it folds into
    ]
    for files in cases:
        assert not any(t.move for t in plan(files, **level).tasks), files
    assert [t.move for t in plan([change(Node(2, 0), 5, 0, 9)], **level).tasks] == [True]
