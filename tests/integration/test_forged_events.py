"""Events are wake-ups, Postgres is the truth: an event that disagrees with the
catalog row it names changes nothing and is refused with the reason (the consume loop
parks it in the DLQ), whatever field it forges.

The first case is the one that lost data: a plan-task event naming another table
with a compatible schema made the dispatcher merge a Pending task with that table's
key, and the real table went from 50 rows to 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import firn
from firn.catalog.claiming import claim_task, release_tasks
from firn.catalog.compactions import commit_plan
from firn.catalog.results import record_result
from firn.engine.execution import Claim, run_local
from firn.engine.kernel import KernelLimits
from firn.engine.planning import plan_now
from firn.errors import EventMismatchError
from firn.events.plans import PlanTaskEvent
from firn.events.tasks import TaskResultEvent
from firn.events.wire import as_event
from firn.kafka import Topics, ensure_topics, producer
from firn.model.plans import PlanRecord
from firn.model.schema import TableSchema
from firn.model.tasks import OutputFile, TaskResult
from firn.settings import FirnSettings
from firn_services.committer import handlers as committer_handlers
from firn_services.committer.handlers import Committer
from firn_services.dispatcher import handlers as dispatcher_handlers
from firn_services.dispatcher.handlers import Dispatcher

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64(), nullable=False)]
)


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    ensure_topics(settings, Topics.from_settings(settings).all(), partitions=1)
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def _two_tables(catalog: firn.Catalog) -> tuple[firn.Table, firn.Table, PlanRecord]:
    """``real`` keyed by id with 50 rows and a released plan; ``other`` with the same
    columns keyed by v, whose every row has v = 0."""
    real = catalog.create_table("real", SCHEMA, ["id"], [], {"base.buckets": 1})
    other = catalog.create_table("other", SCHEMA, ["v"], [], {"base.buckets": 1})
    ids = np.arange(50)
    real.upsert(pa.table({"id": ids, "v": np.zeros(50, dtype=np.int64)}))
    real.upsert(pa.table({"id": ids[:5], "v": np.ones(5, dtype=np.int64)}))
    other.upsert(pa.table({"id": [0], "v": [0]}))
    record = plan_now(real.catalog.conn, real, "", "major")
    assert isinstance(record, PlanRecord)
    release_tasks(catalog.conn, record)
    return real, other, record


def _task_event(of: firn.Table, record: PlanRecord, **forged: object) -> Any:
    event = PlanTaskEvent(
        table=of.name,
        table_id=of.table_id,
        partition_key="",
        plan_id=record.plan_id,
        task_id=record.tasks[0].task_id,
        attempt=0,
        input_bytes=1,
    ).model_copy(update=forged)
    return as_event(json.loads(event.to_json()))  # as the consume loop reads it


def _counting_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[object]:
    """Each call of ``module.name`` from now on, as its first argument after the
    connection; the calls go through to the function."""
    calls: list[object] = []
    real = getattr(module, name)

    def counted(conn: Any, event: Any) -> Any:
        calls.append(event)
        return real(conn, event)

    monkeypatch.setattr(module, name, counted)
    return calls


def _states(catalog: firn.Catalog, record: PlanRecord) -> list[str]:
    rows = catalog.conn.execute(
        "SELECT state FROM compaction_task WHERE plan_id = %s ORDER BY ordinal",
        (record.plan_id,),
    ).fetchall()
    return [r[0] for r in rows]


def test_a_plan_task_naming_another_table_runs_nothing(
    settings: FirnSettings, catalog: firn.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, other, record = _two_tables(catalog)
    expected = real.read().sort_by("id")
    ran: list[str] = []

    def runner(t: TableSchema, claims: Sequence[Claim], limits: KernelLimits) -> list[TaskResult]:
        ran.append(t.name)
        return run_local(t, claims, limits)

    topics = Topics.from_settings(settings)
    dispatcher = Dispatcher(catalog, producer(settings), topics, runner, owner="test")
    forgeries = [
        ({"table": other.name, "table_id": other.table_id}, "table_id"),
        ({"table": other.name}, "table 'other'"),
        ({"plan_id": record.plan_id + 1000}, "plan_id"),
        ({"partition_key": "day=1"}, "partition_key"),
        ({"attempt": 7}, "has only reached attempt 0"),
        ({"task_id": 10**9}, "does not exist"),
    ]
    for fields, reason in forgeries:
        with pytest.raises(EventMismatchError, match=reason):
            dispatcher.plan_task(_task_event(real, record, **fields))
    assert ran == []
    assert set(_states(catalog, record)) == {"Pending"}

    dispatcher.plan_task(_task_event(real, record))  # the honest wake-up
    assert ran == ["real"]
    # This process ran the task: the same wake-up again reads no task row to check
    # it, and a forgery of it is still checked against the catalog and refused.
    named = _counting_calls(monkeypatch, dispatcher_handlers, "task_named")
    dispatcher.plan_task(_task_event(real, record))
    assert (named, ran) == ([], ["real"])
    with pytest.raises(EventMismatchError, match="partition_key"):
        dispatcher.plan_task(_task_event(real, record, partition_key="day=1"))
    assert len(named) == 1
    assert commit_plan(catalog.conn, record.plan_id).outcome == "committed"
    assert real.read().sort_by("id").equals(expected)
    assert real.read().num_rows == 50


def _result_event(of: firn.Table, record: PlanRecord, **forged: object) -> Any:
    event = TaskResultEvent(
        table=of.name,
        table_id=of.table_id,
        partition_key="",
        plan_id=record.plan_id,
        task_id=record.tasks[0].task_id,
        attempt=1,
        outcome="prepared",
        rows_written=1,
        seconds=0.1,
    ).model_copy(update=forged)
    return as_event(json.loads(event.to_json()))  # as the consume loop reads it


def test_a_task_result_is_taken_only_for_its_own_task_and_current_attempt(
    settings: FirnSettings, catalog: firn.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, other, record = _two_tables(catalog)
    conn = catalog.conn
    claims = [c for t in record.tasks if (c := claim_task(conn, t.task_id, "test", 60))]
    for result in run_local(real.definition, claims, KernelLimits()):
        assert record_result(conn, result, max_attempts=3) == "prepared"
    committer = Committer(
        catalog.db, producer(settings), Topics.from_settings(settings).compactions
    )
    for fields, reason in [
        ({"table": other.name, "table_id": other.table_id}, "table_id"),
        ({"plan_id": record.plan_id + 1}, "plan_id"),
        ({"attempt": 2}, "has only reached attempt 1"),
    ]:
        with pytest.raises(EventMismatchError, match=reason):
            committer.task_result(_result_event(real, record, **fields))
    assert set(_states(catalog, record)) == {"Prepared"}, "nothing committed"
    committer.task_result(_result_event(real, record))
    assert set(_states(catalog, record)) == {"Committed"}
    # This process committed the plan: its results again ask the catalog nothing,
    # and a forgery of one is still checked against the catalog and refused.
    named = _counting_calls(monkeypatch, committer_handlers, "task_named")
    committer.task_result(_result_event(real, record))
    assert named == []
    with pytest.raises(EventMismatchError, match="plan_id"):
        committer.task_result(_result_event(real, record, plan_id=record.plan_id + 1))
    assert len(named) == 1


def test_outputs_outside_the_attempt_directory_are_never_registered(
    catalog: firn.Catalog,
) -> None:
    """A result claiming a file elsewhere in the table (here: a live change file)
    fails its attempt; the file is neither registered nor recorded for deletion."""
    real, _, record = _two_tables(catalog)
    conn = catalog.conn
    spec, attempt = claim_task(conn, record.tasks[0].task_id, "test", 60) or (None, 0)
    assert spec is not None
    live = real.files().to_pylist()[0]["path"]
    for path in [live, f"{spec.output_dir(attempt)}/../../{live}", "/etc/passwd"]:
        forged = TaskResult(
            task_id=spec.task_id,
            attempt=attempt,
            outputs=(
                OutputFile(
                    path=path,
                    file_type="B",
                    node_m=1,
                    node_i=0,
                    seq=2,
                    size_bytes=1,
                    record_count=1,
                    min_key=None,
                    max_key=None,
                ),
            ),
        )
        assert record_result(conn, forged, max_attempts=9) == "retry"
        assert conn.execute("SELECT count(*) FROM orphan_file").fetchone() == (0,)
        conn.execute(
            "UPDATE compaction_task SET not_before = NULL WHERE task_id = %s", (spec.task_id,)
        )
        spec, attempt = claim_task(conn, spec.task_id, "test", 60) or (None, 0)
        assert spec is not None
    error = conn.execute(
        "SELECT reason FROM state_transition WHERE entity_id = %s AND to_state = 'Failed' "
        "ORDER BY 1 LIMIT 1",
        (spec.task_id,),
    ).fetchone()
    assert error is not None
    assert "outside the attempt directory" in error[0]
