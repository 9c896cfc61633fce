"""The merge kernel on real files: spilling changes to disk past the memory budget
gives exactly the in-memory result, and shallower files are split by hash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import firn
from firn.catalog.files import files_at
from firn.engine.kernel import KernelLimits, run_task
from firn.engine.planner import plan_partition
from firn.model.tasks import TaskSpec
from firn.settings import FirnSettings

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("payload", pa.string())])


@pytest.fixture
def table(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Table]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog.create_table(
            "kernel", SCHEMA, ["id"], [], {"change.buckets": 1, "base.buckets": 2}
        )


def specs(table: firn.Table) -> list[TaskSpec]:
    entries = files_at(table.catalog.conn, table.table_id, table.current_snapshot())
    draft = plan_partition(table.definition, table.properties, "", 0, entries)
    assert draft is not None
    return [
        draft.task_spec(
            t,
            plan_id=1,
            task_id=n,
            table_id=table.table_id,
            location=table.location,
            target_file_size=1 << 30,
        )
        for n, t in enumerate(draft.tasks)
    ]


def merged(
    table: firn.Table, spec: TaskSpec, attempt: int, budget: int, spill_dir: Path | None = None
) -> tuple[pa.Table, int]:
    limits = KernelLimits(
        memory_budget=budget, spill_dir=None if spill_dir is None else str(spill_dir)
    )
    result = run_task(table.definition, spec, attempt, limits)
    assert result.ok
    rows = [table.storage.read_parquet(o.path) for o in result.outputs]
    return pa.concat_tables(rows) if rows else SCHEMA.empty_table(), result.spilled_runs


def test_spilling_gives_the_in_memory_result(table: firn.Table, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    for commit in range(6):
        ids = rng.integers(0, 40_000, 20_000)
        ops = rng.choice(["U", "D"], len(ids), p=[0.7, 0.3])
        payload = [f"c{commit}-{i}" for i in ids]
        table.commit(pa.table({"id": ids, "payload": payload, "_op": ops}))
    reference = table.read().sort_by("id")
    outputs = []
    for spec in specs(table):  # change files at level 1 are split by hash into 2 nodes
        spill_dir = tmp_path / f"spill-{spec.task_id}"
        spill_dir.mkdir()
        in_memory, spilled = merged(table, spec, 1, budget=1 << 30, spill_dir=spill_dir)
        assert spilled == 0
        on_disk, spilled = merged(table, spec, 2, budget=256 * 1024, spill_dir=spill_dir)
        assert spilled >= 4, "a budget far below the change set must spill"
        assert not list(spill_dir.iterdir()), "a task's spilled runs outlived it"
        assert on_disk.equals(in_memory), "spilled and in-memory merges differ"
        ids = on_disk.column("id").to_numpy()
        assert (np.diff(ids) > 0).all(), "output is not sorted and unique by key"
        outputs.append(on_disk)
    assert pa.concat_tables(outputs).sort_by("id").equals(reference.cast(SCHEMA))
