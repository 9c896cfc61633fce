"""The merge kernel on real files: spilling changes to disk past the memory budget
gives exactly the in-memory result, and shallower files are split by hash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import firn
from firn.catalog.files import files_at
from firn.engine.kernel import KernelLimits, run_task
from firn.engine.policies import plan
from firn.model.tasks import TaskSpec
from firn.settings import FirnSettings
from tests.integration.table_checks import planned_specs

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("payload", pa.string())])


@pytest.fixture
def table(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Table]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog.create_table(
            "kernel", SCHEMA, ["id"], [], {"change.buckets": 1, "base.buckets": 2}
        )


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
    for spec in planned_specs(table):  # change files at level 1 are split by hash into 2 nodes
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


def test_outputs_store_integer_keys_and_run_columns_delta_encoded(table: firn.Table) -> None:
    """Compaction outputs (a fold's base files, a merge's runs) store the integer key,
    ``_seq`` and ``_ord`` delta-encoded and the payload string with a dictionary; the
    rows read back are the table's."""
    rng = np.random.default_rng(3)
    for commit in range(3):
        ids = rng.integers(0, 5_000, 2_000)
        payload = [f"c{commit}-{i % 7}" for i in ids]
        table.commit(pa.table({"id": ids, "payload": payload, "_op": ["U"] * len(ids)}))
    reference = table.read().sort_by("id")
    entries = files_at(table.catalog.conn, table.table_id, table.current_snapshot())
    for kind, delta_columns in (("minor", {"id", "_seq", "_ord"}), ("major", {"id"})):
        draft = plan(table.definition, table.properties, "", 0, entries, kind)
        assert draft is not None
        folded = []
        for n, task in enumerate(draft.tasks):
            spec = draft.task_spec(
                task,
                plan_id=1,
                task_id=100 * len(kind) + n,
                table_id=table.table_id,
                location=table.location,
                target_file_size=1 << 30,
            )
            result = run_task(table.definition, spec, 1, KernelLimits())
            assert result.ok
            assert result.outputs
            for output in result.outputs:
                with table.storage.fs.open_input_file(
                    table.storage.full_path(output.path)
                ) as source:
                    metadata = pq.ParquetFile(source).metadata
                chunks = {
                    metadata.row_group(0).column(c).path_in_schema: metadata.row_group(0).column(c)
                    for c in range(metadata.num_columns)
                }
                assert delta_columns <= set(chunks), f"{kind}: columns {sorted(chunks)}"
                for name in delta_columns:
                    assert "DELTA_BINARY_PACKED" in chunks[name].encodings, (kind, name)
                assert "RLE_DICTIONARY" in chunks["payload"].encodings
                if kind == "major":
                    folded.append(table.storage.read_parquet(output.path))
    assert pa.concat_tables(folded).sort_by("id").equals(reference.cast(SCHEMA))
