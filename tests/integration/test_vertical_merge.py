"""The vertical merge (``firn.engine.vertical``) on real files: a major task merged key
first and then column group by column group writes exactly the rows the row-wise
merge writes, over base files with deletion vectors, change files at a shallower
level (split by hash), same-commit delete-then-insert and null values; its files
respect the task's cuts and its spill files do not outlive it. Plans of wide tables
carry the group size; the reference-model tests (``test_compaction_model``,
``test_tiered_model``, ``test_schema_evolution_model``) run both merges too."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import firn
from firn.engine.kernel import KernelLimits, run_task
from firn.model.tasks import TaskResult, TaskSpec
from firn.model.values import key_from_json
from firn.settings import FirnSettings
from tests.hash_tree import HASH_TREE
from tests.integration.table_checks import planned_specs

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("label", pa.string()),
        pa.field("price", pa.float64()),
        pa.field("flag", pa.bool_()),
        pa.field("at", pa.timestamp("us")),
        pa.field("note", pa.string()),
    ]
)


@pytest.fixture
def table(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Table]:
    with firn.connect(warehouse=str(tmp_path / "warehouse"), settings=settings) as catalog:
        yield catalog.create_table(
            "wide",
            SCHEMA,
            ["id"],
            [],
            {
                "change.buckets": 1,
                "base.buckets": 2,
                "deletion-vectors.max-ratio": 0.5,
                "deletion-vectors.min-file-bytes": 1,
                **HASH_TREE,
            },
        )


def change_set(rng: np.random.Generator, commit: int, n: int, keys: int) -> pa.Table:
    ids = rng.integers(0, keys, n)
    ops = rng.choice(["U", "D"], n, p=[0.8, 0.2])
    missing = rng.random(n) < 0.2  # some nulls in every value column
    return pa.table(
        {
            "id": ids,
            "qty": pa.array(ids * 10 + commit, mask=missing),
            "label": pa.array([f"c{commit}-{i % 13}" for i in ids], mask=missing),
            "price": pa.array(ids / 7.0 + commit, mask=missing),
            "flag": pa.array(ids % 3 == commit % 3, mask=missing),
            "at": pa.array(ids * 1_000_000 + commit, pa.timestamp("us"), mask=missing),
            "note": pa.array([f"{'x' * (i % 40)}{commit}" for i in ids]),
            "_op": ops,
        }
    )


def outputs(table: firn.Table, result: TaskResult) -> pa.Table:
    assert result.ok, result.error
    parts = [table.storage.read_parquet(o.path) for o in result.outputs]
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


@pytest.fixture
def folded_table(table: firn.Table) -> firn.Table:
    """A table whose next major task reads base files, some with deletion vectors,
    and change files of a shallower level (hashed into the task's node)."""
    rng = np.random.default_rng(11)
    table.commit(change_set(rng, 0, 20_000, 20_000))
    firn.compact(table, engine="local")
    table.commit(change_set(rng, 1, 2_000, 20_000))
    firn.compact(table, engine="local")  # a fold: touched files keep a vector
    assert any(f["deletion_vector"] for f in table.files().to_pylist()), "no vector to read"
    for commit in range(2, 5):
        table.commit(change_set(rng, commit, 3_000, 25_000))
    # Delete then insert the same keys in one commit: the insert wins.
    again = change_set(rng, 5, 500, 25_000)
    deletes = again.set_column(again.schema.get_field_index("_op"), "_op", pa.array(["D"] * 500))
    inserts = again.set_column(again.schema.get_field_index("_op"), "_op", pa.array(["U"] * 500))
    table.commit(pa.concat_tables([deletes, inserts]))
    return table


def test_vertical_merge_writes_the_row_wise_rows(folded_table: firn.Table, tmp_path: Path) -> None:
    table = folded_table
    reference = table.read().sort_by("id")
    specs = planned_specs(table, target_file_size=16 << 10)
    assert len(specs) == 2, "one task per base node"
    assert all(s.base_files and s.change_files for s in specs)
    assert any(f.deletion_vector for s in specs for f in s.base_files)
    merged = []
    for spec in specs:
        row_wise = outputs(table, run_task(table.definition, spec, 1))
        for group in (1, 4, 100):
            spill_dir = tmp_path / f"spill-{spec.task_id}-{group}"
            spill_dir.mkdir()
            limits = KernelLimits(spill_dir=str(spill_dir))
            vertical = dataclasses.replace(spec, vertical_group=group)
            result = run_task(table.definition, vertical, 2, limits)
            rows = outputs(table, result)
            assert rows.equals(row_wise), f"group of {group}: the merges differ"
            assert len(result.outputs) > 1, "small target: several files"
            assert result.rows_read > 0
            assert not list(spill_dir.iterdir()), "the group spill files outlived the task"
        merged.append(row_wise)
    assert pa.concat_tables(merged).sort_by("id").equals(reference.cast(SCHEMA))


def test_vertical_files_respect_the_tasks_cuts(folded_table: firn.Table) -> None:
    table = folded_table
    spec = planned_specs(table, target_file_size=16 << 10)[0]
    live = outputs(table, run_task(table.definition, spec, 1)).column("id").to_numpy()
    cuts = [[int(live[len(live) // 3])], [int(live[len(live) // 3 + 1])], [int(live[-1]) + 1]]
    vertical = dataclasses.replace(spec, vertical_group=3, cut_before=tuple(cuts))
    result = run_task(table.definition, vertical, 2)
    assert result.ok, result.error
    for output in result.outputs:
        low = key_from_json(output.min_key, table.definition.key_schema)
        high = key_from_json(output.max_key, table.definition.key_schema)
        for (cut,) in cuts:
            assert not low[0] < cut <= high[0], f"{output.path} spans the cut at {cut}"
    starts = {key_from_json(o.min_key, table.definition.key_schema)[0] for o in result.outputs}
    assert {cuts[0][0], cuts[1][0]} <= starts


def test_wide_tables_plan_vertical_major_tasks(settings: FirnSettings, tmp_path: Path) -> None:
    wide = pa.schema(
        [pa.field("id", pa.int64(), nullable=False)]
        + [pa.field(f"v{n:03d}", pa.float64()) for n in range(80)]
    )
    with firn.connect(warehouse=str(tmp_path / "warehouse"), settings=settings) as catalog:
        table = catalog.create_table("wide_plans", wide, ["id"], [], {})
        narrow = catalog.create_table("narrow_plans", SCHEMA, ["id"], [], {})
        assert table.properties.vertical_group(table.definition) == 8
        assert narrow.properties.vertical_group(narrow.definition) == 0
        rows = {"id": np.arange(1000), **{f"v{n:03d}": np.ones(1000) for n in range(80)}}
        table.commit(pa.table({**rows, "_op": ["U"] * 1000}))
        summary = firn.compact(table, engine="local")
        assert summary["failed_attempts"] == 0, summary["errors"]
        specs = [
            TaskSpec.from_json(s)
            for (s,) in catalog.conn.execute(
                "SELECT spec::text FROM compaction_task JOIN compaction_plan USING (plan_id) "
                "WHERE table_id = %s",
                (table.table_id,),
            ).fetchall()
        ]
        assert specs
        assert all(s.vertical_group == 8 for s in specs)
        assert table.read().sort_by("id").equals(pa.table(rows, schema=wide))
        table.set_properties({"compaction.vertical.min-columns": 0})
        assert table.properties.vertical_group(table.definition) == 0
