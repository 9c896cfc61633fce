"""Schema evolution on the real catalog: one block is one version and one snapshot
or nothing; concurrent changes; what commits may send after a change; reads,
filters, incremental reads, loads and verify across versions; field ids in every
Parquet file; a task planned under one version never drops a newer column."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import firn
from firn.errors import CommitError, ConfigError, FirnError
from firn.settings import FirnSettings
from tests.hash_tree import HASH_TREE

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int32()),
        pa.field("note", pa.string()),
    ]
)
_names = itertools.count()


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Any:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def new_table(catalog: firn.Catalog, **props: Any) -> firn.Table:
    properties = {"change.buckets": 2, "base.buckets": 2, **props}
    return catalog.create_table(
        f"evolve_{next(_names)}", SCHEMA, ["region", "id"], ["region"], properties
    )


def upsert(table: firn.Table, rows: list[dict[str, Any]]) -> int:
    table.refresh()
    schema = pa.schema([table.schema.field(name) for name in rows[0]])
    return table.upsert(pa.Table.from_pylist(rows, schema=schema))


def by_id(table: pa.Table) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in table.to_pylist()}


def test_a_block_is_one_version_and_one_snapshot_or_nothing(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    upsert(table, [{"region": "eu", "id": 1, "qty": 3, "note": "a"}])
    before = table.current_snapshot()
    with table.update_schema() as u:
        u.add_column("price", pa.decimal128(10, 2), default=Decimal("9.99"), doc="unit price")
        u.rename_column("note", "comment")
        u.update_column("qty", field_type=pa.int64())
    assert table.current_snapshot() == before + 1
    versions = table.schemas()
    assert [(v.schema_id, v.snapshot_id) for v in versions] == [(0, 0), (1, before + 1)]
    assert versions[1].changes[0] == "add price decimal128(10, 2)"
    assert table.schema.names == ["region", "id", "qty", "comment", "price"]
    assert table.read().to_pylist() == [
        {"region": "eu", "id": 1, "qty": 3, "comment": "a", "price": Decimal("9.99")}
    ]

    # A refused operation, or an exception in the block, applies nothing.
    def refused() -> None:
        with table.update_schema() as u:
            u.add_column("extra", pa.int64())
            u.delete_column("id")

    def abandoned() -> None:
        with table.update_schema() as u:
            u.add_column("extra", pa.int64())
            raise RuntimeError("the caller changed its mind")

    with pytest.raises(ConfigError, match="primary key"):
        refused()
    with pytest.raises(RuntimeError):
        abandoned()
    assert len(table.schemas()) == 2
    assert table.current_snapshot() == before + 1
    # Another handle sees the change at its next look.
    other = catalog.table(table.name)
    assert other.schema.names == table.schema.names
    assert other.schema_id == 1


def test_concurrent_changes_one_wins_the_other_is_refused_whole(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    other = catalog.table(table.name)
    first = table.update_schema().add_column("a", pa.int64())
    second = other.update_schema().add_column("b", pa.int64())
    assert first.commit() is not None
    with pytest.raises(CommitError, match="schema changed since"):
        second.commit()
    assert other.refresh().schema.names == [*SCHEMA.names, "a"]


def test_commits_after_changes(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    producer = catalog.table(table.name)  # opened before the changes
    with table.update_schema() as u:
        u.add_column("score", pa.int64(), default=5)
        u.delete_column("note")
    # A producer still sending the previous version's columns.
    old = pa.table({"region": ["eu"], "id": [1], "qty": pa.array([2], pa.int32()), "_op": ["U"]})
    producer.commit(old)
    with pytest.raises(ConfigError, match=r"dropped from table .* in schema version 1"):
        producer.commit(old.append_column("note", pa.array(["x"])))
    table.set_properties({"schema.ignore-dropped-columns": True})
    catalog.table(table.name).commit(old.append_column("note", pa.array(["x"])))
    with pytest.raises(ConfigError, match="merge_schema=True"):
        producer.commit(old.append_column("color", pa.array(["red"])))
    producer.commit(old.append_column("color", pa.array(["red"])), merge_schema=True)
    assert table.refresh().schema.names == ["region", "id", "qty", "score", "color"]
    assert table.read().to_pylist() == [
        {"region": "eu", "id": 1, "qty": 2, "score": 5, "color": "red"}
    ]
    # Widened: an int32 column of a change set still goes into the int64 column.
    with table.update_schema() as u:
        u.update_column("qty", field_type=pa.int64())
    producer.commit(old)
    assert table.read().column("qty").type == pa.int64()


def test_reads_filters_and_changes_across_versions(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    first = upsert(table, [{"region": "eu", "id": i, "qty": i, "note": f"n{i}"} for i in range(6)])
    snap0 = table.current_snapshot()
    firn.compact(table, engine="local")  # base files of version 0
    with table.update_schema() as u:
        u.rename_column("qty", "quantity")
        u.add_column("flag", pa.bool_(), default=True)
        u.delete_column("note")
        u.add_column("note", pa.string(), default="new")  # the same name, a new column
    upsert(table, [{"region": "eu", "id": 9, "quantity": 9, "flag": False, "note": "nine"}])
    latest = by_id(table.read())
    assert latest[1] == {"region": "eu", "id": 1, "quantity": 1, "flag": True, "note": "new"}
    assert latest[9]["flag"] is False
    # Filters on renamed and added columns, the old files judged by their defaults.
    assert sorted(by_id(table.scan(filter="quantity >= 4").to_arrow())) == [4, 5, 9]
    assert sorted(by_id(table.scan(filter="flag = false").to_arrow())) == [9]
    assert len(table.scan(filter="note = 'new'").to_arrow()) == 6
    assert table.scan(columns=["id", "flag"]).to_arrow().schema.names == ["id", "flag"]
    with pytest.raises(ConfigError, match="unknown column"):
        table.scan(filter="qty > 1")
    # The old snapshot reads with its own schema.
    old = table.read(snapshot=snap0)
    assert old.schema.names == SCHEMA.names
    assert by_id(old)[2] == {"region": "eu", "id": 2, "qty": 2, "note": "n2"}
    assert by_id(table.scan(filter="qty = 2", snapshot=snap0).to_arrow()).keys() == {2}
    # Incremental reads come in the end snapshot's schema.
    changes = table.changes(0).to_arrow()
    assert changes.schema.names[:5] == ["region", "id", "quantity", "flag", "note"]
    assert {r["id"]: r["quantity"] for r in changes.to_pylist()} == {
        **{i: i for i in range(6)},
        9: 9,
    }
    assert first > 0
    assert table.verify(deep=True).problems == ()
    assert table.verify(snapshot=snap0, deep=True).problems == ()


def test_data_files_carry_field_ids(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    upsert(table, [{"region": "eu", "id": 1, "qty": 1, "note": "x"}])
    with table.update_schema() as u:
        u.add_column("when", pa.date32(), default=dt.date(2026, 1, 1))
    upsert(table, [{"region": "eu", "id": 2, "qty": 2, "note": "y", "when": dt.date(2026, 2, 2)}])
    firn.compact(table, kind="full", engine="local")
    for row in table.files().to_pylist():
        # Parquet's own schema (not the Arrow schema stored beside it) names the ids.
        text = str(pq.ParquetFile(table.storage.full_path(row["path"])).schema)
        ids = {name: int(i) for i, name in re.findall(r"field_id=(\d+) (\w+)[ ;]", text)}
        ids.pop("schema", None)
        assert ids == {"region": 1, "id": 2, "qty": 3, "note": 4, "when": 5}, row


def test_a_load_after_changes_and_old_base_files(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    upsert(table, [{"region": r, "id": 1, "qty": 1, "note": "x"} for r in ("eu", "us")])
    firn.compact(table, engine="local")
    with table.update_schema() as u:
        u.add_column("score", pa.int64(), default=0)
    table.load(
        pa.table({"region": ["eu"], "id": [5], "qty": pa.array([5], pa.int32()), "note": ["l"]}),
        partitions="region=eu",
    )
    rows = sorted(table.read().to_pylist(), key=lambda r: r["region"])
    assert rows == [
        {"region": "eu", "id": 5, "qty": 5, "note": "l", "score": 0},
        {"region": "us", "id": 1, "qty": 1, "note": "x", "score": 0},
    ]
    versions = {(r["partition"], r["schema_id"]) for r in table.files().to_pylist()}
    assert versions == {("region=eu", 1), ("region=us", 0)}


def test_a_task_never_writes_a_newer_input_under_its_older_version(
    catalog: firn.Catalog,
) -> None:
    from firn.engine.kernel import run_task
    from firn.model.tasks import TaskSpec

    table = new_table(catalog)
    upsert(table, [{"region": "eu", "id": 1, "qty": 1, "note": "x"}])
    planned = firn.compact(table, engine="local")
    assert planned["failed_attempts"] == 0
    spec_row = table.catalog.conn.execute(  # type: ignore[attr-defined]
        "SELECT spec FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %s ORDER BY task_id DESC LIMIT 1",
        (table.table_id,),
    ).fetchone()
    spec = TaskSpec.from_dict(spec_row[0])
    assert spec.table is not None
    assert spec.schema_id == 0
    # As if an input had been written under version 1 after the plan was made.
    newer = dataclasses.replace(spec.change_files[0], schema_id=1)
    forged = dataclasses.replace(spec, change_files=(newer, *spec.change_files[1:]))
    with pytest.raises(FirnError, match="plan it again") as raised:
        run_task(table.definition, forged, 9)
    assert raised.value.retryable is False


KILLED_CHANGER = """
import sys
import pyarrow as pa
import firn

with firn.connect() as catalog:
    table = catalog.table(sys.argv[1])
    print("ready", flush=True)
    for n in range(100_000):
        with table.update_schema() as u:
            u.add_column(f"c{n}", pa.int64(), default=n)
            u.delete_column(f"c{n - 1}" if n else "note")
"""


def test_a_process_killed_while_changing_the_schema_leaves_whole_versions(
    stack_settings: FirnSettings, catalog: firn.Catalog
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.integration.service_processes import service_env

    table = new_table(catalog)
    upsert(table, [{"region": "eu", "id": 1, "qty": 1, "note": "x"}])
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHANGER, table.name],
        env=service_env(stack_settings),
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"ready"
    time.sleep(1.5)  # some dozens of changes
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    versions = table.schemas()
    assert [v.schema_id for v in versions] == list(range(len(versions)))
    assert len(versions) > 2
    table.refresh()
    assert table.schema_id == versions[-1].schema_id
    conn = table.catalog.conn  # type: ignore[attr-defined]
    snapshots = {
        sid: kind
        for sid, kind in conn.execute(
            "SELECT snapshot_id, kind FROM snapshot WHERE table_id = %s", (table.table_id,)
        ).fetchall()
    }
    assert all(snapshots[v.snapshot_id] == "schema" for v in versions[1:])
    assert conn.execute(
        "SELECT last_snapshot FROM catalog_table WHERE table_id = %s", (table.table_id,)
    ).fetchone()[0] == max(snapshots)
    # Each version is whole: one column added, the previous one gone.
    last = table.schema.names[-1]
    assert table.schema.names == ["region", "id", "qty", last]
    assert table.read().to_pylist() == [{"region": "eu", "id": 1, "qty": 1, last: int(last[1:])}]
    upsert(table, [{"region": "eu", "id": 2, "qty": 2, last: 5}])
    assert len(table.read()) == 2


def test_old_base_files_are_rewritten_as_the_partitions_compaction_pays_for_it(
    catalog: firn.Catalog,
) -> None:
    """The same seeded workload with the rule on and off: with it, the old-version
    base files are gone after a few rounds of commits and automatic compaction;
    without it, some are left (the folds touch them only through deletion vectors)."""
    import numpy as np

    def run(ratio: float) -> list[int]:
        rng = np.random.default_rng(7)
        table = new_table(
            catalog,
            **{
                "schema.rewrite-ratio": ratio,
                # Every commit's 150 rows fold, however few bytes they are.
                "major.change-ratio": 0.01,
                "major.change-bytes-lowest": 0,
                # Base files at two nodes: the rule rewrites whole files, and one
                # root file per partition would outgrow what 8 small folds pay for.
                **HASH_TREE,
                # Folds keep the base files their few changes touch, with vectors.
                "deletion-vectors.min-file-bytes": "1KiB",
            },
        )
        ids = np.arange(20_000)
        regions = np.array(["eu", "us"])[ids % 2]
        table.load(
            pa.table(
                {
                    "region": regions,
                    "id": ids,
                    "qty": pa.array(rng.integers(0, 100, len(ids)), pa.int32()),
                    "note": [f"n{i}" for i in ids],
                }
            )
        )
        with table.update_schema() as u:
            u.add_column("score", pa.float64(), default=1.0)
        old = []
        for _ in range(8):
            picked = rng.choice(ids, 150, replace=False)
            table.upsert(
                pa.table(
                    {
                        "region": np.array(["eu", "us"])[picked % 2],
                        "id": picked,
                        "qty": pa.array(rng.integers(0, 100, 150), pa.int32()),
                        "note": ["u"] * 150,
                        "score": rng.random(150),
                    }
                )
            )
            summary = firn.compact(table, kind="auto", engine="local")
            assert summary["failed_attempts"] == 0
            old.append(
                sum(
                    r["size"]
                    for r in table.files().to_pylist()
                    if r["store"] == "base" and r["schema_id"] == 0
                )
            )
        assert len(table.read()) == len(ids)
        return old

    paid = run(4.0)
    unpaid = run(0.0)
    assert paid[-1] == 0, paid
    assert unpaid[-1] > 0, unpaid
    assert all(a >= b for a, b in itertools.pairwise(paid)), paid


def test_a_table_made_before_field_ids_evolves(catalog: firn.Catalog) -> None:
    """A table created before migration 0013 has no field ids in its stored schema and
    files without them: its columns are 1, 2, ... in order, and it evolves like any."""
    from firn.model.schema import schema_without_ids

    table = new_table(catalog)
    upsert(table, [{"region": "eu", "id": 1, "qty": 1, "note": "old"}])
    firn.compact(table, engine="local")
    legacy = pa.ipc.read_schema(pa.py_buffer(table.definition.to_ipc()))
    plain = schema_without_ids(legacy).serialize().to_pybytes()
    conn = table.catalog.conn  # type: ignore[attr-defined]
    conn.execute(
        "UPDATE catalog_table SET schema_ipc = %s, last_column_id = 0 WHERE table_id = %s",
        (plain, table.table_id),
    )
    conn.execute(
        "UPDATE table_schema SET schema_ipc = %s WHERE table_id = %s",
        (plain, table.table_id),
    )
    old = catalog.table(table.name)
    assert [old.definition.field_id(n) for n in old.schema.names] == [1, 2, 3, 4]
    with old.update_schema() as u:
        u.rename_column("note", "comment")
        u.add_column("extra", pa.int64(), default=9)
    assert old.definition.field_id("extra") == 5
    assert old.read().to_pylist() == [
        {"region": "eu", "id": 1, "qty": 1, "comment": "old", "extra": 9}
    ]


def test_moved_and_bin_packed_files_across_versions(catalog: firn.Catalog) -> None:
    """A change file moved into base by metadata keeps the version it was written
    under; an unkeyed table's bin-packing reads files of every version into the
    current one."""
    keyed = catalog.create_table(
        f"moves_{next(_names)}",
        pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())]),
        ["k"],
        [],
        {
            "base.buckets": 1,
            "change.buckets": 1,
            "target-file-size": "2KiB",
            "deletion-vectors.max-ratio": 0,
        },
    )
    keyed.upsert(pa.table({"k": pa.array(range(0, 200), pa.int64()), "v": ["a"] * 200}))
    with keyed.update_schema() as u:
        u.rename_column("v", "label")
        u.add_column("n", pa.int64(), default=3)
    summary = firn.compact(keyed, kind="major", engine="local")
    assert summary["failed_attempts"] == 0
    base = [r for r in keyed.files().to_pylist() if r["store"] == "base"]
    assert len(base) == 1
    assert base[0]["schema_id"] == 0, "moved as it is, under the version it was written in"
    assert keyed.read().to_pylist()[:1] == [{"k": 0, "label": "a", "n": 3}]

    unkeyed = catalog.create_table(
        f"log_{next(_names)}",
        pa.schema([pa.field("line", pa.string()), pa.field("level", pa.int32())]),
        [],
    )
    unkeyed.upsert(pa.table({"line": ["x", "y"], "level": pa.array([1, 2], pa.int32())}))
    with unkeyed.update_schema() as u:
        u.update_column("level", field_type=pa.int64())
        u.add_column("host", pa.string(), default="h0")
        u.delete_column("line")
    unkeyed.upsert(pa.table({"level": pa.array([3], pa.int64()), "host": ["h1"]}))
    assert firn.compact(unkeyed, kind="major", engine="local")["failed_attempts"] == 0
    rows = sorted(unkeyed.read().to_pylist(), key=lambda r: r["level"])
    assert rows == [
        {"level": 1, "host": "h0"},
        {"level": 2, "host": "h0"},
        {"level": 3, "host": "h1"},
    ]
    assert {r["schema_id"] for r in unkeyed.files().to_pylist()} == {1}
