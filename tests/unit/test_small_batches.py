"""``run_small_here``: which batches skip the Spark job (by their input bytes)."""

from __future__ import annotations

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

    def __call__(
        self, table: TableSchema, claims: Sequence[Claim], limits: KernelLimits
    ) -> list[TaskResult]:
        self.batches.append([spec.task_id for spec, _ in claims])
        return [TaskResult(task_id=spec.task_id, attempt=a) for spec, a in claims]


def test_batch_bytes_count_base_and_change_inputs_of_every_task() -> None:
    claims = [(_spec(1, (3 * MiB,), (MiB, MiB)), 1), (_spec(2, (), (2 * MiB,)), 1)]
    assert batch_input_bytes(claims) == 7 * MiB


def test_small_batches_run_here_and_larger_ones_go_to_the_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark, here = Recorder(), Recorder()
    monkeypatch.setattr(execution, "run_local", here)
    run = run_small_here(spark, 4 * MiB)
    table = None  # the recorders never look at it
    limits = KernelLimits()
    run(table, [(_spec(1, (), (MiB, 3 * MiB)), 1)], limits)
    run(table, [(_spec(2, (), (MiB,)), 1), (_spec(3, (MiB,), (2 * MiB + 1,)), 1)], limits)
    assert here.batches == [[1]]  # exactly at the limit: here
    assert spark.batches == [[2, 3]]  # one byte over, counted over the whole batch


def test_zero_sends_every_batch_to_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    spark, here = Recorder(), Recorder()
    monkeypatch.setattr(execution, "run_local", here)
    run = run_small_here(spark, 0)
    empty_inputs = replace(_spec(1, (), ()), change_files=(_file(1, 0),))
    run(None, [(empty_inputs, 1), (_spec(2, (), (1,)), 1)], KernelLimits())
    assert spark.batches == [[1, 2]]
    assert not here.batches
