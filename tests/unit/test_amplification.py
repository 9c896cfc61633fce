"""The pure parts of ``firn.catalog.amplification``: sorted runs per node as a
histogram, and the wall time of overlapping task executions. The SQL that reads them
from the catalog is tested in tests/integration/test_demo.py."""

from __future__ import annotations

import datetime as dt

import pytest

from firn.catalog.amplification import CompactionWork, StoreShape, runs_quantile, union_seconds
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
