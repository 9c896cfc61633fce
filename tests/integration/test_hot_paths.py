"""The services' hot paths cost what the change costs, not what the catalog holds
(issue 37): the catalog statements the metrics service runs for a commit event, a
compaction event and its periodic check, the planner's for a plan, the dispatcher's
for its queue and a claim, and a whole compaction's (plan, claim, record, commit:
``firn.compact``, the services' path minus Kafka) are counted on a small catalog and
again after 10^4 more tables' worth of rows (4 partitions, files, snapshots and
plans each, generated in SQL); the counts must not move. Every SELECT they ran is
then EXPLAINed on the large catalog: none may read a catalog table whole.
Statement counts and plans, not timings."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pyarrow as pa
import pytest

import firn
from firn.catalog.claiming import claim_tasks, claimable_tasks, release_tasks
from firn.catalog.compactions import compaction_event, ready_plans_beside
from firn.catalog.fleet import fleet_status
from firn.catalog.metrics import STATES_PER_QUERY, TableRead, change_stamp, partition_states_of
from firn.catalog.observed import merge_latencies
from firn.catalog.plans import fail_plan, open_plan, open_plans, request_view
from firn.engine.planning import plan_now
from firn.model.plans import PlanRecord
from firn.model.properties import TableProperties
from firn.model.states import Actor
from firn.settings import FirnSettings
from services.metrics.handlers import CatalogReader

SCHEMA = pa.schema(
    [pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False)]
)
GENERATED_TABLES = 10_000
SCANNED = re.compile(
    r"Seq Scan on (catalog_partition|catalog_table|data_file|snapshot|compaction_plan"
    r"|compaction_task)\b"
)
FLEET_SIZE = "SELECT (SELECT count(*) FROM catalog_table), (SELECT count(*) FROM catalog_partition)"


class Statements(psycopg.Cursor[Any]):
    """A cursor that writes down every statement run through it."""

    seen: ClassVar[list[tuple[str, Any]]] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Statements:
        Statements.seen.append((_text(query), params))
        super().execute(query, params, **kwargs)
        return self

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        Statements.seen.append((_text(query), None))
        super().executemany(query, params_seq, **kwargs)


def _text(query: Any) -> str:
    return query if isinstance(query, str) else repr(query)


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog:
        yield catalog


def counted(conn: psycopg.Connection[Any], work: Callable[[], object]) -> list[tuple[str, Any]]:
    """The statements ``work`` ran on ``conn``."""
    conn.cursor_factory = Statements
    Statements.seen = []
    try:
        work()
    finally:
        conn.cursor_factory = psycopg.Cursor
    return list(Statements.seen)


def _rows(k: int) -> pa.Table:
    return pa.table({"p": ["a", "b", "c", "d"], "k": [k] * 4}, schema=SCHEMA)


def hot_paths(catalog: firn.Catalog, settings: FirnSettings, name: str) -> dict[str, list[Any]]:
    """Each hot path once, on a table of its own, with what it ran; the table is left
    with nothing to compact, so the next measurement's periodic check has the same
    backlog to read."""
    table = catalog.create_table(name, SCHEMA, ["p", "k"], ["p"])
    events: list[Any] = []
    catalog.tables_catalog.publisher = _Capture(events)  # the commit event, not sent
    table.upsert(_rows(1))
    table.upsert(_rows(2))
    event = events[-1]  # the second commit's
    reader = CatalogReader(lambda: firn.connect(settings=settings), ttl=60.0)
    try:
        reader.properties(table.name, table.table_id)  # the cache a running service has
        conn = reader.catalog.conn
        stamp = change_stamp(conn) - 1  # the second commit's partitions changed since
        ran = {
            "metrics: commit event": counted(conn, lambda: reader.commit_updates(event)),
            "metrics: periodic check": counted(conn, lambda: reader.changed_readings(stamp)),
        }
        own = catalog.conn
        plan: list[Any] = []
        ran["planner: plan"] = counted(
            own,
            lambda: plan.append(plan_now(own, table, "p=a", "major")),  # type: ignore[arg-type]
        )
        assert isinstance(plan[0], PlanRecord)
        ran["planner: release"] = counted(own, lambda: release_tasks(own, plan[0]))
        queue: list[Any] = []
        ran["dispatcher: queue"] = counted(own, lambda: queue.extend(claimable_tasks(own, 100)))
        assert queue, "the plan's task waits to be claimed"
        ids = [c.task_id for c in queue if c.table_id == table.table_id]
        assert ids, "the plan's task is in the queue"
        ran["dispatcher: claim"] = counted(own, lambda: claim_tasks(own, ids, "hot", 60.0))
        ran["compaction (plan, claim, record, commit)"] = counted(
            own, lambda: firn.compact(table, "p=b", kind="major", engine="local")
        )
        done = own.execute(
            "SELECT max(plan_id) FROM compaction_plan WHERE table_id = %s AND state = 'Committed'",
            (table.table_id,),
        ).fetchone()
        assert done is not None
        compaction = compaction_event(own, int(done[0]))
        assert compaction is not None
        # What the committer asks of a plan's table to commit its ready plans together,
        # and the planner of a partition's open plan and of a table's when gathering.
        ran["committer: ready plans beside"] = counted(
            own, lambda: ready_plans_beside(own, int(done[0]))
        )
        ran["planner: open plans"] = counted(
            own,
            lambda: (open_plan(own, table.table_id, "p=a"), open_plans(own, table.table_id)),
        )
        ran["planner: a request's view"] = counted(
            own, lambda: request_view(own, table.table_id, "p=a", "major", 2)
        )
        ran["committer: waits a plan ended"] = counted(
            own, lambda: merge_latencies(own, table.table_id, "p=b", 0, 2, dt.datetime.now(dt.UTC))
        )
        ran["metrics: compaction event"] = counted(
            conn, lambda: reader.compaction_readings(compaction)
        )
        fail_plan(own, plan[0].plan_id, "measured only", by=Actor.DISPATCHER)
        firn.compact(table, kind="major", engine="local")
    finally:
        reader.close()
    return ran


class _Acknowledged:
    def delivered(self) -> bool:
        return True


class _Capture:
    def __init__(self, into: list[Any]) -> None:
        self.into = into

    def send(self, _key: str, event: Any) -> _Acknowledged:
        self.into.append(event)
        return _Acknowledged()

    def close(self) -> None:
        pass


def grow(conn: psycopg.Connection[Any], tables: int) -> None:
    """``tables`` more tables' worth of catalog rows, each with 4 partitions, a base and
    two change files per partition (folded), three snapshots and a committed plan
    with its task, and 50 of them an open plan waiting for an executor."""
    first = 1_000_000
    conn.execute(
        "INSERT INTO catalog_table (table_id, name, schema_ipc, primary_key, partition_by, "
        "properties, location, last_seq, last_snapshot) SELECT %(first)s + g, 'gen_' || g, "
        "'\\x00', '{p,k}', '{p}', '{}', '/nowhere', 3, 3 FROM generate_series(1, %(n)s) g",
        {"first": first, "n": tables},
    )
    conn.execute(
        "INSERT INTO catalog_partition (table_id, partition_key, partition_values, max_seq, "
        "max_merged_seq) SELECT %(first)s + t, 'p=' || p, '{}', 3, 3 "
        "FROM generate_series(1, %(n)s) t, generate_series(1, 4) p",
        {"first": first, "n": tables},
    )
    conn.execute(
        "INSERT INTO snapshot (table_id, snapshot_id, kind, seq) SELECT %(first)s + t, s, "
        "CASE WHEN s = 2 THEN 'compaction' ELSE 'commit' END, CASE WHEN s = 2 THEN NULL "
        "ELSE s END FROM generate_series(1, %(n)s) t, generate_series(1, 3) s",
        {"first": first, "n": tables},
    )
    conn.execute(
        "INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, seq, "
        "path, size_bytes, record_count, added_snapshot) SELECT %(first)s + t, 'p=' || p, "
        "CASE WHEN f = 1 THEN 'base' ELSE 'change' END, CASE WHEN f = 1 THEN 'B' ELSE 'I' END, "
        "4, 0, f, 'gen/' || t || '/' || p || '/' || f, 1000, 10, f "
        "FROM generate_series(1, %(n)s) t, generate_series(1, 4) p, generate_series(1, 3) f",
        {"first": first, "n": tables},
    )
    conn.execute(
        "INSERT INTO compaction_plan (table_id, partition_key, kind, state, from_merged_seq, "
        "planned_snapshot, to_seq, committed_snapshot) SELECT %(first)s + t, 'p=1', 'major', "
        "'Committed', 0, 1, 1, 2 FROM generate_series(1, %(n)s) t",
        {"first": first, "n": tables},
    )
    # Each committed plan's task, finished in the last minute (inside the dispatchers'
    # quota window: a busy fleet ends thousands of tasks in it) for nine tables in ten,
    # an hour ago for the others; the first 50 tables have an open plan with a Pending
    # task, so the queue weighs quotas across tables.
    conn.execute(
        "INSERT INTO compaction_task (plan_id, partition_key, ordinal, state, spec, input_bytes, "
        "started_at, finished_at) SELECT plan_id, partition_key, 0, 'Committed', '{}', 1000, "
        "now() - w, now() - w "
        "FROM compaction_plan, LATERAL (SELECT CASE WHEN table_id %% 10 <> 0 "
        "THEN interval '1 minute' ELSE interval '1 hour' END AS w) since "
        "WHERE table_id > %(first)s",
        {"first": first},
    )
    conn.execute(
        "INSERT INTO compaction_plan (table_id, partition_key, kind, state, from_merged_seq, "
        "planned_snapshot, to_seq, score) SELECT %(first)s + t, 'p=2', 'major', 'Executing', "
        "3, 3, 3, 0 FROM generate_series(1, 50) t",
        {"first": first},
    )
    conn.execute(
        "INSERT INTO compaction_task (plan_id, partition_key, ordinal, state, spec, input_bytes) "
        "SELECT plan_id, partition_key, 0, 'Pending', '{}', 1000 FROM compaction_plan "
        "WHERE table_id > %(first)s AND state = 'Executing'",
        {"first": first},
    )
    for name in (
        "catalog_table", "catalog_partition", "snapshot", "data_file", "compaction_plan",
        "compaction_task",
    ):  # fmt: skip
        conn.execute(f"ANALYZE {name}")


def test_hot_paths_cost_the_change_not_the_catalog(
    catalog: firn.Catalog, settings: FirnSettings
) -> None:
    small = hot_paths(catalog, settings, "hot_small")
    grow(catalog.conn, GENERATED_TABLES)
    large = hot_paths(catalog, settings, "hot_large")
    assert {path: len(ran) for path, ran in large.items()} == {
        path: len(ran) for path, ran in small.items()
    }
    for path, statements in large.items():
        for query, params in statements:
            if not query.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            plan = "\n".join(
                str(row[0])
                for row in catalog.conn.execute("EXPLAIN " + query, params).fetchall()  # type: ignore[arg-type]
            )
            assert not SCANNED.search(plan), f"{path}: {query}\n{plan}"
    # A fleet's periodic check and firn status --fleet read a few hundred tables a
    # statement: through the indexes too, however much history the catalog holds.
    generated = [
        TableRead(1_000_000 + t, TableProperties()) for t in range(1, STATES_PER_QUERY + 1)
    ]
    fleet = {
        "states of many tables": counted(
            catalog.conn, lambda: partition_states_of(catalog.conn, generated)
        ),
        "status --fleet": counted(catalog.conn, lambda: fleet_status(catalog.conn)),
    }
    assert len(fleet["states of many tables"]) == 1
    for path, statements in fleet.items():
        for query, params in statements:
            if query.startswith(FLEET_SIZE):
                continue  # the fleet's size, counted whole: its tables, not their history
            plan = "\n".join(
                str(row[0])
                for row in catalog.conn.execute("EXPLAIN " + query, params).fetchall()  # type: ignore[arg-type]
            )
            assert not SCANNED.search(plan), f"{path}: {query}\n{plan}"
