"""The committer's handler and sweep on the real stack: a plan commits once all its
tasks are Prepared, is announced on firn.compactions, and repeats change nothing."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import firn
from firn.catalog.claiming import claim_task, release_tasks
from firn.catalog.results import record_result
from firn.engine.execution import run_local
from firn.engine.kernel import KernelLimits
from firn.engine.planning import plan_now
from firn.events.tasks import TaskResultEvent
from firn.events.wire import as_event
from firn.kafka import Topics, ensure_topics, producer
from firn.model.plans import PlanRecord
from firn.settings import FirnSettings
from firn_services.committer.handlers import Committer
from tests.hash_tree import HASH_TREE
from tests.integration.test_planner_service import drain

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def prepared_plan(table: firn.Table, *, leave_one: bool = False) -> tuple[PlanRecord, list[int]]:
    """A plan with its tasks run and recorded (all but the last, if asked)."""
    conn = table.catalog.conn
    record = plan_now(table.catalog.conn, table, "", "major")
    assert isinstance(record, PlanRecord)
    release_tasks(conn, record)
    tasks = record.tasks[:-1] if leave_one else record.tasks
    claims = [c for t in tasks if (c := claim_task(conn, t.task_id, "test", 60)) is not None]
    for result in run_local(table.definition, claims, KernelLimits()):
        assert record_result(conn, result, max_attempts=3) == "prepared"
    return record, [t.task_id for t in tasks]


def result_event(table: firn.Table, record: PlanRecord, task_id: int) -> TaskResultEvent:
    event = TaskResultEvent(
        table=table.name,
        table_id=table.table_id,
        partition_key="",
        plan_id=record.plan_id,
        task_id=task_id,
        attempt=1,
        outcome="prepared",
        rows_written=1,
        seconds=0.1,
    )
    return TaskResultEvent.model_validate(as_event(json.loads(event.to_json())))


def test_a_complete_plan_is_committed_and_announced_once(
    settings: FirnSettings, catalog: firn.Catalog, unique: str
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table = catalog.create_table("done", SCHEMA, ["id"], [], {"base.buckets": 2, **HASH_TREE})
    ids = np.arange(200)
    table.upsert(pa.table({"id": ids, "v": [f"v{i}" for i in ids]}))
    expected = table.read().sort_by("id")
    committer = Committer(catalog.db, producer(settings), topics.compactions)

    record, done = prepared_plan(table, leave_one=True)
    committer.task_result(result_event(table, record, done[0]))
    state = catalog.conn.execute(
        "SELECT state FROM compaction_plan WHERE plan_id = %s", (record.plan_id,)
    ).fetchone()
    assert state == ("Executing",), "a plan with a task still pending must wait"
    assert committer.sweep() == []

    # The last task finishes, but its task-result event is lost: the sweep commits.
    last = record.tasks[-1]
    claim = claim_task(catalog.conn, last.task_id, "test", 60)
    assert claim is not None
    (result,) = run_local(table.definition, [claim], KernelLimits())
    assert record_result(catalog.conn, result, max_attempts=3) == "prepared"
    assert committer.sweep() == [record.plan_id]
    assert committer.sweep() == []
    # A late task-result for it commits nothing new; this committer announced it
    # already, a restarted one (a crash between commit and event) announces it again.
    assert committer.commit(record.plan_id) == "already"
    restarted = Committer(catalog.db, producer(settings), topics.compactions)
    assert restarted.commit(record.plan_id) == "already"

    assert table.read().sort_by("id").equals(expected)
    events = drain(settings, topics.compactions, f"compactions-{unique}", expect=2)
    assert len(events) == 2
    assert {e["plan_id"] for e in events} == {record.plan_id}
    assert events[0]["snapshot_id"] == events[1]["snapshot_id"] == table.current_snapshot()
    assert events[0]["added_rows"] == 200


def removed_paths(table: firn.Table) -> list[str]:
    rows = table.catalog.conn.execute(
        "SELECT path FROM data_file WHERE table_id = %s AND removed_snapshot IS NOT NULL",
        (table.table_id,),
    ).fetchall()
    return [path for (path,) in rows]


def test_the_sweep_applies_retention_at_most_every_interval(
    settings: FirnSettings, catalog: firn.Catalog
) -> None:
    topics = Topics.from_settings(settings)
    table = catalog.create_table("kept", SCHEMA, ["id"], [], {"snapshot.retention": 0})
    table.upsert(pa.table({"id": np.arange(50), "v": ["a"] * 50}))
    firn.compact(table, engine="local")
    first = removed_paths(table)
    assert first
    assert all(table.storage.exists(p) for p in first)
    committer = Committer(catalog.db, producer(settings), topics.compactions, expire_every=3600)

    assert committer.sweep() == []  # the first sweep applies retention at once
    assert not any(table.storage.exists(p) for p in first)
    assert removed_paths(table) == []

    table.upsert(pa.table({"id": np.arange(10), "v": ["b"] * 10}))
    firn.compact(table, engine="local")
    second = removed_paths(table)
    assert second
    committer.sweep()  # within the hour: not again
    assert all(table.storage.exists(p) for p in second)

    Committer(catalog.db, producer(settings), topics.compactions, expire_every=0).sweep()
    assert not any(table.storage.exists(p) for p in second)
    assert table.read().num_rows == 50


def test_a_retention_round_goes_on_at_the_next_sweep(
    settings: FirnSettings, catalog: firn.Catalog
) -> None:
    """A sweep spends at most ``expiry_turn`` on retention (at least one table), so
    plans keep committing while a round over a large fleet runs; the next sweep goes
    on where it stopped, and a new round waits for ``expire_every``."""
    topics = Topics.from_settings(settings)
    tables = []
    for name in ("turn_a", "turn_b", "turn_c"):
        table = catalog.create_table(name, SCHEMA, ["id"], [], {"snapshot.retention": 0})
        table.upsert(pa.table({"id": np.arange(20), "v": ["a"] * 20}))
        firn.compact(table, engine="local")
        assert removed_paths(table)
        tables.append(table)
    committer = Committer(
        catalog.db, producer(settings), topics.compactions, expire_every=3600, expiry_turn=0
    )
    for swept in range(1, 4):
        committer.sweep()
        assert [removed_paths(t) == [] for t in tables] == [i < swept for i in range(3)]

    tables[0].upsert(pa.table({"id": np.arange(5), "v": ["b"] * 5}))
    firn.compact(tables[0], engine="local")
    committer.sweep()  # the round is over, and the next is an hour away
    assert removed_paths(tables[0])
    assert all(t.read().num_rows == 20 for t in tables)


def write_stray(table: firn.Table, path: str, days_old: float) -> None:
    """A file the catalog does not know (a killed executor's), written ``days_old`` ago."""
    table.storage.write_parquet(path, pa.table({"id": [1], "v": ["x"]}))
    then = time.time() - days_old * 86400
    os.utime(table.storage.full_path(path), (then, then))


def test_the_sweep_lists_storage_for_unknown_files_at_most_every_interval(
    settings: FirnSettings, catalog: firn.Catalog
) -> None:
    topics = Topics.from_settings(settings)
    table = catalog.create_table("swept", SCHEMA, ["id"], [])
    table.upsert(pa.table({"id": np.arange(50), "v": ["a"] * 50}))
    live = table.files().column("path").to_pylist()
    write_stray(table, "base/p9-t9-a1/B-1-0-00000.parquet", days_old=3)
    write_stray(table, "base/p9-t9-a2/B-1-0-00000.parquet", days_old=1)  # within 2 days
    committer = Committer(
        catalog.db, producer(settings), topics.compactions, expire_every=0, sweep_every=3600
    )

    committer.sweep()  # the first sweep lists storage at once
    assert not table.storage.exists("base/p9-t9-a1/B-1-0-00000.parquet")
    assert table.storage.exists("base/p9-t9-a2/B-1-0-00000.parquet")
    assert all(table.storage.exists(p) for p in live)

    write_stray(table, "base/p9-t9-a3/B-1-0-00000.parquet", days_old=3)
    committer.sweep()  # retention again, but the listing is not due within the hour
    assert table.storage.exists("base/p9-t9-a3/B-1-0-00000.parquet")

    Committer(
        catalog.db, producer(settings), topics.compactions, expire_every=0, sweep_every=0
    ).sweep()
    assert not table.storage.exists("base/p9-t9-a3/B-1-0-00000.parquet")
    assert all(table.storage.exists(p) for p in live)
    assert table.read().num_rows == 50
