"""The dispatcher's merge worker processes (``firn.engine.worker_pool``): where a
batch's tasks go, and a worker that died is started again. A real fold on a worker:
tests/integration/test_deletion_vectors.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from firn.engine.kernel import KernelLimits
from firn.engine.worker_pool import WorkerPool
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, TaskSpec
from tests.waiting import eventually

TABLE = TableSchema.build("t", pa.schema([pa.field("k", pa.int64(), nullable=False)]), ["k"])


def _spec(task_id: int, node_i: int = 0) -> TaskSpec:
    return TaskSpec(
        plan_id=1,
        task_id=task_id,
        table_id=1,
        location="/nowhere",
        partition_key="",
        kind="minor",
        node_m=4,
        node_i=node_i,
        lower=None,
        upper=None,
        base_files=(),
        change_files=(InputFile(1, "change/gone.parquet", "I", 1, 0, 1, 10, 1),),
        from_merged_seq=0,
        to_seq=1,
        target_file_size=1 << 20,
        output_prefix=f"base/p1-t{task_id}",
    )


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    workers = WorkerPool(2)
    yield workers
    workers.close()


def test_a_batchs_tasks_spread_over_the_workers_each_node_to_its_own_first(
    pool: WorkerPool,
) -> None:
    same_node = [_spec(n) for n in range(4)]
    load = [0, 0]
    picks = []
    for spec in same_node:
        n = pool._worker_for(spec, load)
        load[n] += 1
        picks.append(n)
    assert load == [2, 2], "one node's tasks still share the workers out"
    home = picks[0]
    assert picks[::2] == [home, home], "the node's worker first whenever it is not busier"
    fresh = [0, 0]
    assert {pool._worker_for(replace(same_node[0], task_id=9), fresh) for _ in range(3)} == {
        home
    }, "the same node goes to the same worker, batch after batch"


def test_a_task_that_fails_on_a_worker_is_reported_not_raised(pool: WorkerPool) -> None:
    (result,) = pool(TABLE, [(_spec(1), 1)], KernelLimits())
    assert not result.ok
    assert not result.retryable, "a missing input is damage, not weather"
    assert "CorruptFileError" in (result.error or "")
    assert "gone.parquet" in (result.error or "")


def test_a_worker_that_died_is_started_again(pool: WorkerPool) -> None:
    for n in range(2):
        with pytest.raises(BrokenProcessPool):
            pool._workers[n].submit(os._exit, 3).result()
    results = pool(TABLE, [(_spec(1), 1), (_spec(2, node_i=1), 1)], KernelLimits())
    # Both ran, on workers started again: the missing input is what they report.
    assert [r.task_id for r in results] == [1, 2]
    assert all("gone.parquet" in (r.error or "") for r in results), results


def _niceness() -> int:
    return os.nice(0)


def test_workers_run_below_the_dispatcher_by_their_niceness() -> None:
    """Merges are background work: the workers run ``nice`` lower than the process
    that started them, and at its own priority with 0."""
    own = os.nice(0)
    for nice in (0, 7):
        pool = WorkerPool(1, nice=nice)
        try:
            assert pool._workers[0].submit(_niceness).result() == min(own + nice, 19)
        finally:
            pool.close()
    with pytest.raises(ValueError, match="niceness"):
        WorkerPool(1, nice=20)


DISPATCHER = """
import multiprocessing, sys, time
from firn.engine.worker_pool import WorkerPool

if __name__ == "__main__":
    pool = WorkerPool(2)
    while len(multiprocessing.active_children()) < 2:
        time.sleep(0.05)
    print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
    time.sleep(600)
"""


def test_workers_exit_when_their_dispatcher_is_killed(tmp_path: Path) -> None:
    """A killed dispatcher cannot shut its workers down: they notice on their own."""
    script = tmp_path / "dispatcher.py"
    script.write_text(DISPATCHER)
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True
    ) as parent:
        try:
            assert parent.stdout is not None
            workers = [int(pid) for pid in parent.stdout.readline().split()]
            assert len(workers) == 2
            assert all(_alive(pid) for pid in workers)
        finally:
            parent.kill()
    eventually(
        lambda: not any(_alive(pid) for pid in workers),
        timeout=30,
        what="the workers ending with their dispatcher",
    )


def _alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
