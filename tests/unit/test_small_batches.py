"""``run_small_here``: which batches skip the Spark job (by their input bytes), and
``run_local``'s threads (the worker processes: tests/integration/test_worker_pool.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

import pytest

from firn.engine import execution
from firn.engine.execution import Claim, batch_input_bytes, run_small_here
from firn.engine.kernel import KernelLimits
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, TaskResult, TaskSpec

MiB = 1 << 20


def _file(file_id: int, size: int, file_type: str = "I") -> InputFile:
    return InputFile(file_id, f"change/{file_id}.parquet", file_type, 1, 0, file_id, size, 10)


def _spec(task_id: int, base: tuple[int, ...], changes: tuple[int, ...]) -> TaskSpec:
    return TaskSpec(
        plan_id=1,
        task_id=task_id,
        table_id=1,
        location="/nowhere",
        partition_key="",
        kind="minor",
        node_m=1,
        node_i=0,
        lower=None,
        upper=None,
        base_files=tuple(_file(100 + i, s, "B") for i, s in enumerate(base)),
        change_files=tuple(_file(i, s) for i, s in enumerate(changes)),
        from_merged_seq=0,
        to_seq=1,
        target_file_size=MiB,
        output_prefix=f"base/p1-t{task_id}",
    )


class Recorder:
    """A runner that notes which tasks each batch held."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.threads: list[int] = []

    def __call__(
        self, table: TableSchema, claims: Sequence[Claim], limits: KernelLimits, threads: int = 1
    ) -> list[TaskResult]:
        self.batches.append([spec.task_id for spec, _ in claims])
        self.threads.append(threads)
        return [TaskResult(task_id=spec.task_id, attempt=a) for spec, a in claims]


def test_batch_bytes_count_base_and_change_inputs_of_every_task() -> None:
    claims = [(_spec(1, (3 * MiB,), (MiB, MiB)), 1), (_spec(2, (), (2 * MiB,)), 1)]
    assert batch_input_bytes(claims) == 7 * MiB


def test_small_batches_run_here_and_larger_ones_go_to_the_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark, here, default = Recorder(), Recorder(), Recorder()
    monkeypatch.setattr(execution, "run_local", default)
    run = run_small_here(spark, 4 * MiB, here)
    table = None  # the recorders never look at it
    limits = KernelLimits()
    run(table, [(_spec(1, (), (MiB, 3 * MiB)), 1)], limits)
    run(table, [(_spec(2, (), (MiB,)), 1), (_spec(3, (MiB,), (2 * MiB + 1,)), 1)], limits)
    assert here.batches == [[1]]  # exactly at the limit: here
    assert spark.batches == [[2, 3]]  # one byte over, counted over the whole batch
    assert not default.batches
    run_small_here(spark, 4 * MiB)(table, [(_spec(4, (), (MiB,)), 1)], limits)
    assert default.batches == [[4]]  # no local runner given: run_local


def test_zero_sends_every_batch_to_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    spark, here = Recorder(), Recorder()
    monkeypatch.setattr(execution, "run_local", here)
    run = run_small_here(spark, 0)
    empty_inputs = replace(_spec(1, (), ()), change_files=(_file(1, 0),))
    run(None, [(empty_inputs, 1), (_spec(2, (), (1,)), 1)], KernelLimits())
    assert spark.batches == [[1, 2]]
    assert not here.batches


def test_local_threads_run_tasks_at_once_and_keep_claim_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    both_running = threading.Barrier(2, timeout=10)
    second_finished = threading.Event()
    finished: list[int] = []

    def run(table: TableSchema, limits: KernelLimits, spec: TaskSpec, attempt: int) -> TaskResult:
        both_running.wait()  # raises BrokenBarrierError unless both tasks run at once
        if spec.task_id == 1:
            assert second_finished.wait(10)  # the first claim finishes last
        finished.append(spec.task_id)
        if spec.task_id == 2:
            second_finished.set()
        return TaskResult(task_id=spec.task_id, attempt=attempt)

    monkeypatch.setattr(execution, "run_reporting", run)
    claims = [(_spec(1, (), (MiB,)), 1), (_spec(2, (), (MiB,)), 1)]
    results = execution.run_local(None, claims, KernelLimits(), threads=2)  # type: ignore[arg-type]
    assert finished == [2, 1]
    assert [r.task_id for r in results] == [1, 2]


def test_one_thread_runs_tasks_one_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[str] = set()

    def run(table: TableSchema, limits: KernelLimits, spec: TaskSpec, attempt: int) -> TaskResult:
        threads.add(threading.current_thread().name)
        return TaskResult(task_id=spec.task_id, attempt=attempt)

    monkeypatch.setattr(execution, "run_reporting", run)
    claims = [(_spec(n, (), (MiB,)), 1) for n in range(3)]
    results = execution.run_local(None, claims, KernelLimits(), threads=1)  # type: ignore[arg-type]
    assert [r.task_id for r in results] == [0, 1, 2]
    assert threads == {threading.current_thread().name}
