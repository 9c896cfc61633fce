"""``firn.catalog.amplification`` against the real catalog: the sorted runs a read
of each node merges, through commits, a minor and a major compaction, with change
files one level deeper than the base; the bytes of the live files; and the work of
the compaction tasks from their transition history."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import firn
from firn.catalog.amplification import compaction_work, read_store_shape
from firn.catalog.progress import last_plan_id, read_progress
from firn.model.tasks import TaskSpec
from firn.settings import FirnSettings
from tests.hash_tree import HASH_TREE

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("value", pa.string())])


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def _commit(table: firn.Table, rng: random.Random) -> None:
    """200 upserts and 20 deletes over 1,000 keys: every node gets both kinds."""
    ids = [rng.randrange(1000) for _ in range(220)]
    table.commit(
        pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "value": [f"v{rng.randrange(100)}" for _ in ids],
                "_op": ["U"] * 200 + ["D"] * 20,
            }
        )
    )


def _sizes(table: firn.Table, store: str) -> int:
    files = table.files()
    return sum(
        size
        for kind, size in zip(
            files.column("store").to_pylist(), files.column("size").to_pylist(), strict=True
        )
        if kind == store
    )


def test_runs_per_node_and_bytes_follow_commits_and_compactions(catalog: firn.Catalog) -> None:
    # Change files at 4 nodes, base files at 2: each base-level node reads two
    # change nodes, whose files of one commit share its seq (one run).
    table = catalog.create_table(
        "amp.events",
        SCHEMA,
        ["id"],
        properties={"change.buckets": 4, "base.buckets": 2, **HASH_TREE},
    )
    conn, rng = catalog.conn, random.Random(4)
    start_plan = last_plan_id(conn, table.table_id)
    for _ in range(3):
        _commit(table, rng)
    shape = read_store_shape(conn, table.table_id)
    assert shape.runs_per_node == {3: 2}
    assert (shape.base_bytes, shape.base_rows) == (0, 0)
    assert shape.unmerged_bytes == shape.live_bytes == _sizes(table, "change") > 0

    minor = firn.compact(table, kind="minor", engine="local")
    assert [p["outcome"] for p in minor["plans"]] == ["committed"]
    # The minor's insert and delete outputs carry one seq: one run per node.
    assert read_store_shape(conn, table.table_id).runs_per_node == {1: 2}
    _commit(table, rng)
    assert read_store_shape(conn, table.table_id).runs_per_node == {2: 2}

    firn.compact(table, engine="local")
    shape = read_store_shape(conn, table.table_id)
    assert shape.runs_per_node == {1: 2}  # the base only
    assert shape.unmerged_bytes == 0
    assert shape.base_bytes == shape.live_bytes == _sizes(table, "base") > 0
    assert shape.base_rows == table.read().num_rows > 0
    _commit(table, rng)
    shape = read_progress(conn, table.table_id).shape
    assert shape.runs_per_node == {2: 2}
    assert shape.unmerged_bytes == _sizes(table, "change") > 0
    assert shape.live_bytes == shape.base_bytes + shape.unmerged_bytes
    assert (shape.mean_runs, shape.p95_runs) == (2.0, 2)
    firn.compact(table, engine="local")  # this major reads the base too
    assert read_store_shape(conn, table.table_id).runs_per_node == {1: 2}

    work = compaction_work(conn, table.table_id, start_plan)
    specs = [
        TaskSpec.from_dict(row[0])
        for row in conn.execute(
            "SELECT t.spec FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
            "WHERE p.table_id = %s AND t.state = 'Committed'",
            (table.table_id,),
        ).fetchall()
    ]
    assert (work.tasks, work.input_bytes) == (len(specs), sum(s.input_bytes for s in specs))
    assert work.base_bytes == sum(f.size_bytes for s in specs for f in s.base_files) > 0
    assert work.base_files == sum(len(s.base_files) for s in specs)
    assert work.change_files == sum(len(s.change_files) for s in specs) > work.tasks
    assert work.tasks >= 4 + 2 + 2  # the minor's four change nodes, two per major
    assert 0 < work.busy_seconds <= work.task_seconds
    assert compaction_work(conn, table.table_id, last_plan_id(conn, table.table_id)).tasks == 0
