"""The pure parts of ``firn.catalog.amplification``: sorted runs per node from the
live files, as a histogram, and the wall time of overlapping task executions. The SQL
that reads them from the catalog is tested in tests/integration/test_amplification.py."""

from __future__ import annotations

import datetime as dt

import pytest

from firn.catalog.amplification import (
    CompactionWork,
    FileGroup,
    StoreShape,
    runs_quantile,
    store_shape,
    union_seconds,
)
from firn.catalog.progress import percentile

T0 = dt.datetime(2024, 6, 1, 12, 0, tzinfo=dt.UTC)


def _span(start: float, end: float) -> tuple[dt.datetime, dt.datetime]:
    return T0 + dt.timedelta(seconds=start), T0 + dt.timedelta(seconds=end)


@pytest.mark.parametrize(
    "histogram", [{1: 1}, {1: 19, 9: 1}, {1: 18, 9: 2}, {2: 3, 5: 40, 6: 1, 11: 4}, {0: 2, 3: 2}]
)
def test_runs_quantile_is_the_nearest_rank_of_the_expanded_values(
    histogram: dict[int, int],
) -> None:
    values = [runs for runs, n in histogram.items() for _ in range(n)]
    for q in (0.5, 0.95, 1.0):
        assert runs_quantile(histogram, q) == percentile(values, q)


def test_a_store_shape_without_files_has_no_run_statistics() -> None:
    empty = StoreShape()
    assert (empty.nodes, empty.mean_runs, empty.p95_runs) == (0, None, None)
    assert runs_quantile({3: 0}, 0.95) is None
    shape = StoreShape(runs_per_node={1: 6, 4: 2})
    assert (shape.nodes, shape.mean_runs, shape.p95_runs) == (8, 1.75, 4)


def _group(part: str, store: str, node: tuple[int, int], seq: int, size: int) -> FileGroup:
    return FileGroup(part, store, node[0], node[1], seq, size, size // 10)


def test_runs_per_node_count_the_base_once_and_each_unmerged_seq_once() -> None:
    groups = [
        # Partition a, base level 2. Node (2,0): a base run, and commits 5 and 6.
        _group("a", "base", (2, 0), 4, 1000),
        _group("a", "base", (2, 0), 4, 900),  # another base file of the node: same run
        _group("a", "change", (4, 0), 5, 10),  # change files one level deeper:
        _group("a", "change", (4, 2), 5, 10),  # both under (2,0), one commit, one run
        _group("a", "change", (4, 2), 6, 10),
        _group("a", "change", (4, 1), 3, 10),  # merged (seq <= 4): no run, still live
        # Node (2,1): a minor's output (seq 7) at the root covers both nodes.
        _group("a", "change", (1, 0), 7, 40),
        # Partition b: nothing merged yet, no base; node (2,1) only.
        _group("b", "change", (2, 1), 2, 20),
        _group("b", "change", (2, 1), 8, 20),
    ]
    shape = store_shape(groups, {"a": 4, "b": 0}, base_buckets=2)
    # a/(2,0): base + 5 + 6 + 7 = 4 runs; a/(2,1): 7 = 1; b/(2,1): 2 + 8 = 2.
    assert shape.runs_per_node == {1: 1, 2: 1, 4: 1}
    assert (shape.live_bytes, shape.base_bytes, shape.base_rows) == (2020, 1900, 190)
    assert shape.unmerged_bytes == 10 + 10 + 10 + 40 + 20 + 20
    # At a deeper base level the same files spread over more nodes.
    deeper = store_shape(groups, {"a": 4, "b": 0}, base_buckets=4)
    # a: (4,0) base+5+7, (4,2) base+5+6+7, (4,1) and (4,3) 7 (the base is at (2,0));
    # b: (4,1) and (4,3) 2+8.
    assert deeper.runs_per_node == {1: 2, 2: 2, 3: 1, 4: 1}


def test_busy_time_is_the_union_of_the_executing_intervals() -> None:
    assert union_seconds([]) == 0.0
    # A batch of three overlapping tasks, a gap, one alone, then one nested in it.
    spans = [_span(0, 4), _span(1, 4), _span(3, 6), _span(10, 12), _span(10.5, 11)]
    assert union_seconds(reversed(spans)) == pytest.approx(8.0)
    assert union_seconds([_span(0, 2), _span(2, 3)]) == pytest.approx(3.0)  # touching


def test_compaction_work_reports_bytes_per_busy_second() -> None:
    work = CompactionWork(
        tasks=4,
        input_bytes=40 << 20,
        task_seconds=12.0,
        busy_seconds=5.0,
        base_bytes=30 << 20,
        base_files=4,
        change_files=50,
    )
    assert work.throughput == 8 << 20
    assert work.as_dict() == {
        "tasks": 4,
        "input_bytes": 40 << 20,
        "mean_task_input_bytes": 10 << 20,
        "base_share": 0.75,
        "mean_task_base_files": 1.0,
        "mean_task_change_files": 12.5,
        "task_seconds": 12.0,
        "busy_seconds": 5.0,
        "bytes_per_busy_s": 8 << 20,
    }
    idle = CompactionWork(tasks=0, input_bytes=0, task_seconds=0.0, busy_seconds=0.0)
    assert (idle.throughput, idle.mean_task_bytes) == (None, None)
    assert idle.as_dict()["bytes_per_busy_s"] is None
