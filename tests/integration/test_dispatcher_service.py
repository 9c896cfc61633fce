"""The executor-dispatcher's handler and sweep on the real stack (Kafka, Postgres,
Spark): one event runs the plan's Pending tasks as one Spark job; duplicates do
nothing; failures go back to Pending and the sweep announces them again."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import firn
from firn.catalog.claiming import release_tasks
from firn.catalog.compactions import commit_plan
from firn.catalog.results import retry_backoff
from firn.engine.execution import Claim, Runner, run_local, run_spark
from firn.engine.kernel import KernelLimits
from firn.engine.planning import plan_now
from firn.engine.spark_session import spark_session
from firn.events.plans import PlanTaskEvent
from firn.events.wire import as_event
from firn.kafka import Topics, ensure_topics, producer
from firn.model.plans import PlanRecord
from firn.model.schema import TableSchema
from firn.model.tasks import TaskResult
from firn.settings import FirnSettings
from firn_services.dispatcher.handlers import Dispatcher
from tests.hash_tree import HASH_TREE
from tests.integration.test_planner_service import drain

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def planned(catalog: firn.Catalog, name: str) -> tuple[firn.Table, PlanRecord]:
    table = catalog.create_table(name, SCHEMA, ["id"], [], {"base.buckets": 4, **HASH_TREE})
    ids = np.arange(400)
    table.upsert(pa.table({"id": ids, "v": [f"v{i}" for i in ids]}))
    table.delete(pa.table({"id": ids[::7]}))
    record = plan_now(table.catalog.conn, table, "", "major")
    assert isinstance(record, PlanRecord)
    release_tasks(catalog.conn, record)
    return table, record


def task_event(table: firn.Table, record: PlanRecord, n: int) -> PlanTaskEvent:
    event = PlanTaskEvent(
        table=table.name,
        table_id=table.table_id,
        partition_key="",
        plan_id=record.plan_id,
        task_id=record.tasks[n].task_id,
        attempt=0,
        input_bytes=record.tasks[n].input_bytes,
    )
    return PlanTaskEvent.model_validate(as_event(json.loads(event.to_json())))


def states(catalog: firn.Catalog, record: PlanRecord) -> list[tuple[str, int]]:
    return [
        (s, a)
        for s, a in catalog.conn.execute(
            "SELECT state, attempt FROM compaction_task WHERE plan_id = %s ORDER BY ordinal",
            (record.plan_id,),
        ).fetchall()
    ]


def recording(jobs: list[tuple[str, list[int]]]) -> Runner:
    """``run_local``, writing down each call's table and task ids in ``jobs``."""

    def run(t: TableSchema, claims: Sequence[Claim], limits: KernelLimits) -> list[TaskResult]:
        jobs.append((t.name, [spec.task_id for spec, _ in claims]))
        return run_local(t, claims, limits)

    return run


def test_one_event_runs_the_plan_as_one_spark_job(
    settings: FirnSettings, catalog: firn.Catalog, unique: str
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table, record = planned(catalog, "dispatched")
    expected = table.read().sort_by("id")
    jobs: list[int] = []
    spark = spark_session(settings)

    def runner(t: TableSchema, claims: Sequence[Claim], limits: KernelLimits) -> list[TaskResult]:
        jobs.append(len(claims))
        return run_spark(spark, t, claims, limits)

    dispatcher = Dispatcher(catalog, producer(settings), topics, runner, owner="test")
    dispatcher.plan_task(task_event(table, record, 0))
    for n in range(1, len(record.tasks)):
        dispatcher.plan_task(task_event(table, record, n))  # already done: no-ops
    assert jobs == [len(record.tasks)]
    assert states(catalog, record) == [("Prepared", 1)] * len(record.tasks)
    results = drain(settings, topics.task_results, f"results-{unique}", expect=len(record.tasks))
    assert sorted(r["task_id"] for r in results) == sorted(t.task_id for t in record.tasks)
    assert {r["outcome"] for r in results} == {"prepared"}
    assert dispatcher.sweep(min_age_seconds=0) == []

    assert commit_plan(catalog.conn, record.plan_id).outcome == "committed"
    assert table.read().sort_by("id").equals(expected)


def test_failed_attempts_go_back_to_pending_and_the_sweep_announces_them(
    settings: FirnSettings, catalog: firn.Catalog, unique: str
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table, record = planned(catalog, "flaky")

    def failing(t: TableSchema, claims: Sequence[Claim], limits: KernelLimits) -> list[TaskResult]:
        return [TaskResult(task_id=s.task_id, attempt=a, error="disk full") for s, a in claims]

    dispatcher = Dispatcher(catalog, producer(settings), topics, failing, owner="test")
    dispatcher.plan_task(task_event(table, record, 0))
    assert states(catalog, record) == [("Pending", 1)] * len(record.tasks)
    retried = drain(settings, topics.task_results, f"results-{unique}", expect=len(record.tasks))
    assert {(r["outcome"], r["error"]) for r in retried} == {("retry", "disk full")}

    assert dispatcher.sweep(min_age_seconds=0) == [], "backing off: not announced yet"
    not_before = catalog.conn.execute(
        "SELECT DISTINCT not_before - updated_at FROM compaction_task WHERE plan_id = %s",
        (record.plan_id,),
    ).fetchall()
    assert [row[0].total_seconds() for row in not_before] == [retry_backoff(1)]
    catalog.conn.execute(  # the backoff passes
        "UPDATE compaction_task SET not_before = now() WHERE plan_id = %s", (record.plan_id,)
    )
    assert sorted(dispatcher.sweep(min_age_seconds=60)) == sorted(t.task_id for t in record.tasks)
    assert dispatcher.sweep(min_age_seconds=60) == [], "just announced: not again yet"
    announced = drain(settings, topics.plan_tasks, f"tasks-{unique}", expect=len(record.tasks))
    assert {e["attempt"] for e in announced} == {1}

    # The next attempt succeeds (in process this time).
    working = Dispatcher(catalog, producer(settings), topics, run_local, owner="test")
    working.plan_task(task_event(table, record, 0))
    assert states(catalog, record) == [("Prepared", 2)] * len(record.tasks)


def test_the_sweep_announces_a_plan_the_planner_stored_but_never_released(
    settings: FirnSettings, catalog: firn.Catalog, unique: str
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table = catalog.create_table("orphaned_plan", SCHEMA, ["id"], [], {"base.buckets": 2})
    table.upsert(pa.table({"id": np.arange(50), "v": ["x"] * 50}))
    record = plan_now(
        table.catalog.conn, table, "", "major"
    )  # stored; the planner died before releasing
    assert isinstance(record, PlanRecord)
    assert {s for s, _ in states(catalog, record)} == {"Init"}

    dispatcher = Dispatcher(catalog, producer(settings), topics, run_local, owner="test")
    assert dispatcher.sweep(min_age_seconds=60) == [], "too fresh: the planner may be at it"
    swept = dispatcher.sweep(min_age_seconds=0)
    assert sorted(swept) == sorted(t.task_id for t in record.tasks)
    assert {s for s, _ in states(catalog, record)} == {"Pending"}
    announced = drain(settings, topics.plan_tasks, f"tasks-{unique}", expect=len(record.tasks))
    assert sorted(e["task_id"] for e in announced) == sorted(swept)


def test_a_wake_up_runs_the_highest_score_first_within_the_permits(
    settings: FirnSettings, tmp_path: Path
) -> None:
    # Each of these small tasks reserves just over 64 MiB: a 150 MiB budget fits two.
    budgeted = settings.model_copy(
        update={"dispatcher_memory_budget": 150 << 20, "dispatcher_max_concurrent_tasks": 8}
    )
    topics = Topics.from_settings(budgeted)
    ensure_topics(budgeted, topics.all(), partitions=1)
    with firn.connect(warehouse=str(tmp_path), settings=budgeted) as catalog:
        low_table, low = planned(catalog, "low_score")
        _, high = planned(catalog, "high_score")
        for record, score in ((low, 1.0), (high, 9.0)):
            catalog.conn.execute(
                "UPDATE compaction_plan SET score = %s WHERE plan_id = %s", (score, record.plan_id)
            )
        # firn status shows the order the dispatchers will claim in.
        queue = {
            t.name: p["open_plan"]["queue"]
            for t in (low_table, catalog.table("high_score"))
            for p in t.status()["partitions"]
        }
        assert queue == {"high_score": 1, "low_score": 2}
        jobs: list[tuple[str, list[int]]] = []
        runner = recording(jobs)

        dispatcher = Dispatcher(catalog, producer(budgeted), topics, runner, owner="test")
        # Every wake-up names a task of the low-score plan; the catalog's order wins.
        for n in range(len(low.tasks) + len(high.tasks)):
            dispatcher.plan_task(task_event(low_table, low, n % len(low.tasks)))
        assert all(len(ids) <= 2 for _, ids in jobs), jobs
        order = [name for name, _ in jobs]
        assert order == sorted(order, key=lambda name: name != "high_score"), order
        ran = [task for _, ids in jobs for task in ids]
        assert sorted(ran) == sorted(t.task_id for t in (*low.tasks, *high.tasks))
        assert states(catalog, high) == [("Prepared", 1)] * len(high.tasks)
        assert states(catalog, low) == [("Prepared", 1)] * len(low.tasks)


def test_one_wake_up_runs_several_small_tables(settings: FirnSettings, tmp_path: Path) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        made = [planned(catalog, f"small_{n}") for n in range(2)]
        assert sum(len(record.tasks) for _, record in made) <= 8  # one batch's worth
        jobs: list[tuple[str, list[int]]] = []
        runner = recording(jobs)

        dispatcher = Dispatcher(catalog, producer(settings), topics, runner, owner="test")
        table, record = made[0]
        dispatcher.plan_task(task_event(table, record, 0))
        # Small tasks: one wake-up claimed every table's, and ran them table by table.
        assert sorted(name for name, _ in jobs) == ["small_0", "small_1"], jobs
        for (t, record), (name, ids) in zip(made, sorted(jobs), strict=True):
            assert name == t.name
            assert sorted(ids) == sorted(task.task_id for task in record.tasks)
            assert states(catalog, record) == [("Prepared", 1)] * len(record.tasks)
        # A batch too large for the dispatcher's own processes is one table's Spark job.
        spark = settings.model_copy(update={"dispatcher_local_bytes": 0})
        others = [planned(catalog, f"big_{n}") for n in range(2)]
        jobs.clear()
        with firn.connect(warehouse=str(tmp_path), settings=spark) as as_spark:
            Dispatcher(as_spark, producer(spark), topics, runner, owner="test").plan_task(
                task_event(*others[0], 0)
            )
        assert len({name for name, _ in jobs}) == 1, jobs


def test_a_table_over_its_quota_yields_to_others_but_keeps_free_executors(
    settings: FirnSettings, tmp_path: Path
) -> None:
    one_at_a_time = settings.model_copy(update={"dispatcher_max_concurrent_tasks": 1})
    topics = Topics.from_settings(one_at_a_time)
    ensure_topics(one_at_a_time, topics.all(), partitions=1)
    with firn.connect(warehouse=str(tmp_path), settings=one_at_a_time) as catalog:
        hot_table, hot = planned(catalog, "hot")
        cold_table, cold = planned(catalog, "cold")
        for record, score in ((cold, 1.0), (hot, 9.0)):
            catalog.conn.execute(
                "UPDATE compaction_plan SET score = %s WHERE plan_id = %s", (score, record.plan_id)
            )
        jobs: list[str] = []

        def runner(
            t: TableSchema, claims: Sequence[Claim], limits: KernelLimits
        ) -> list[TaskResult]:
            jobs.append(t.name)
            return run_local(t, claims, limits)

        dispatcher = Dispatcher(catalog, producer(one_at_a_time), topics, runner, owner="test")
        dispatcher.plan_task(task_event(cold_table, cold, 0))
        assert jobs == ["hot"]  # within its quota, the higher score goes first
        started, finished = catalog.conn.execute(
            "SELECT started_at, finished_at FROM compaction_task WHERE task_id = %s",
            (hot.tasks[0].task_id,),
        ).fetchone()
        assert started is not None
        assert finished >= started

        # As if that task had kept an executor busy for 200 s of the last 5 min: over
        # hot's quota (0.5 slots x 300 s = 150 s), so cold's tasks now go first.
        catalog.conn.execute(
            "UPDATE compaction_task SET started_at = finished_at - interval '200 seconds' "
            "WHERE task_id = %s",
            (hot.tasks[0].task_id,),
        )

        def queue() -> dict[str, int]:
            return {
                t.name: p["open_plan"]["queue"]
                for t in (hot_table, cold_table)
                for p in t.status()["partitions"]
            }

        assert queue() == {"cold": 1, "hot": 2}
        hot_table.set_properties({"compaction.quota": 1.0})  # 300 s: within it again
        assert queue() == {"hot": 1, "cold": 2}
        hot_table.set_properties({"compaction.quota": 0.5})
        assert queue() == {"cold": 1, "hot": 2}

        for n in range(len(hot.tasks) + len(cold.tasks) - 1):
            dispatcher.plan_task(task_event(hot_table, hot, n % len(hot.tasks)))
        # Every wake-up named a hot task; cold's all ran first, then hot used the
        # executor nobody else was waiting for.
        assert jobs == ["hot"] + ["cold"] * len(cold.tasks) + ["hot"] * (len(hot.tasks) - 1)
        assert states(catalog, hot) == [("Prepared", 1)] * len(hot.tasks)
        assert states(catalog, cold) == [("Prepared", 1)] * len(cold.tasks)
