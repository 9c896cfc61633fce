"""What each service pays to fold a fleet table, measured in one quiet process (issue 37).

`bench/fleet.py` measures the whole stack under load, where every step waits for a
core and a run's figures move by a tenth between runs. This one takes the fleet's
tables (4 partitions, five 200-row change sets) through the services' own handlers,
one table at a time, with Kafka replaced by a list:

1. metrics: each commit event counted (`CatalogReader.commit_updates`);
2. planner: a plan request for each partition (`Planner.plan_request`, which plans
   the first and gathers the others; the rest are answered as covered);
3. dispatcher: woken by the first plan-task event, and again while the table has
   tasks waiting (`Dispatcher.plan_task`, merging with the local runner);
4. committer: each task-result event (`Committer.task_result`);
5. metrics: each compaction event read (`CatalogReader.compaction_readings`);
6. publisher: the table published (`Publisher.publish`).

Each service has its own catalog connection, so what it costs Postgres is its
backend's CPU (from /proc); its own CPU is this process's while it ran. Per plan
(per commit event for the metrics service's commits): statements, client ms and
Postgres ms. Statements are counted at the client (each `execute`; `executemany`
batches are not).

    .venv/bin/python bench/service_cost.py                  # ~1 min
    .venv/bin/python bench/service_cost.py --tables 60 --statements
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import plan_cost
import psycopg
from harness import bench_catalog  # bench/ is on sys.path when run as a script

import firn
from firn.engine.execution import run_local
from firn.events.compactions import CompactionEvent
from firn.events.plans import PlanRequestEvent, PlanTaskEvent
from firn.events.tasks import TaskResultEvent
from firn.events.wire import decode
from firn.iceberg.publisher import Publisher
from firn.kafka.topics import Topics
from firn.postgres.connection import ReconnectingConnection
from firn_services.committer.handlers import Committer
from firn_services.dispatcher.handlers import Dispatcher
from firn_services.metrics.handlers import CatalogReader
from firn_services.planner.handlers import Planner

STEPS = (
    "metrics: commits",
    "planner",
    "dispatcher",
    "committer",
    "metrics: compactions",
    "publisher",
)
TICK = os.sysconf("SC_CLK_TCK")


class Topic:
    """A producer that keeps what it was given (Kafka's part in the chain)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def produce(self, topic: str, key: bytes | None = None, value: bytes = b"", **_: Any) -> None:
        self.sent.append((topic, value))

    def flush(self, _timeout: float = 0.0) -> int:
        return 0

    def poll(self, _timeout: float = 0.0) -> int:
        return 0

    def take(self) -> list[Any]:
        events = [decode(value) for _, value in self.sent]
        self.sent.clear()
        return events


class Commits:
    """The commit-event sink of the producing catalog: keeps the events."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def send(self, _key: str, event: Any) -> Any:
        self.events.append(event)
        return self

    def delivered(self) -> bool:
        return True

    def close(self) -> None:
        pass


class Meter:
    """Statements, client CPU and Postgres backend CPU per step."""

    def __init__(self) -> None:
        self.statements: collections.Counter[str] = collections.Counter()
        self.by_query: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.client_s: collections.Counter[str] = collections.Counter()
        self.server_s: collections.Counter[str] = collections.Counter()
        self.step: str | None = None

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count every `execute` while open, under the step in hand."""
        original = psycopg.Cursor.execute
        meter = self

        def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if meter.step is not None:
                text = query if isinstance(query, str) else repr(query)
                meter.statements[meter.step] += 1
                meter.by_query[meter.step][" ".join(text.split())[:100]] += 1
            return original(cursor, query, *args, **kwargs)

        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        try:
            yield
        finally:
            psycopg.Cursor.execute = original  # type: ignore[method-assign]

    def run(self, step: str, backend: int, work: Callable[[], Any]) -> Any:
        """``work`` as ``step``, its client and backend CPU added to the step's."""
        self.step = step
        server = _cpu_of(backend)
        client = time.process_time()
        try:
            return work()
        finally:
            self.client_s[step] += time.process_time() - client
            self.server_s[step] += _cpu_of(backend) - server
            self.step = None


def _cpu_of(pid: int) -> float:
    """Seconds of CPU a process used (user + system), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _backend(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def tables_with_changes(
    catalog: firn.Catalog, tag: str, args: argparse.Namespace
) -> list[tuple[firn.Table, list[Any]]]:
    """`plan_cost.py`'s fleet tables, each with the commit events its commits made."""
    sink = Commits()
    catalog.tables_catalog.publisher = sink
    try:
        tables = plan_cost.tables_with_changes(catalog, tag, args.partitions, args)
    finally:
        catalog.tables_catalog.publisher = None
    events: dict[int, list[Any]] = collections.defaultdict(list)
    for event in sink.events:
        events[event.table_id].append(event)
    return [(table, events[table.table_id]) for table in tables]


class Services:
    """One of each service's handlers, each on its own catalog connection."""

    def __init__(self, stack: ExitStack, settings: Any) -> None:
        reading = settings.model_copy(update={"kafka_bootstrap": None})
        self.topics = Topics.from_settings(settings)
        self.planned, self.ran, self.committed = Topic(), Topic(), Topic()
        planner_catalog = stack.enter_context(firn.connect(settings=reading))
        self.planner = Planner(planner_catalog, self.planned, self.topics.plan_tasks)  # type: ignore[arg-type]
        dispatcher_catalog = stack.enter_context(firn.connect(settings=reading))
        self.dispatcher = Dispatcher(
            dispatcher_catalog,
            self.ran,  # type: ignore[arg-type]
            self.topics,
            functools.partial(run_local, threads=1),
            owner="bench",
        )
        stack.callback(self.dispatcher.close)
        self.committer_db = ReconnectingConnection(reading)
        stack.callback(self.committer_db.close)
        self.committer = Committer(self.committer_db, self.committed, self.topics.compactions)  # type: ignore[arg-type]
        self.reader = CatalogReader(lambda: firn.connect(settings=reading), ttl=60.0)
        stack.callback(self.reader.close)
        self.publisher_db = ReconnectingConnection(reading)
        stack.callback(self.publisher_db.close)
        self.backends = {
            "planner": _backend(planner_catalog.conn),
            "dispatcher": _backend(dispatcher_catalog.conn),
            "committer": _backend(self.committer_db.conn),
            "metrics": _backend(self.reader.catalog.conn),
            "publisher": _backend(self.publisher_db.conn),
        }

    def fold(self, meter: Meter, table: firn.Table, commits: list[Any]) -> int:
        """One table through the chain; the plans committed."""
        reader, metrics = self.reader, self.backends["metrics"]
        reader.properties(table.name, table.table_id)  # the cache a running service has
        for event in commits:
            meter.run("metrics: commits", metrics, lambda e=event: reader.commit_updates(e))
        partitions = self.reader.catalog.conn.execute(
            "SELECT partition_key, max_seq FROM catalog_partition WHERE table_id = %s "
            "ORDER BY partition_key",
            (table.table_id,),
        ).fetchall()
        for key, max_seq in partitions:
            request = PlanRequestEvent(
                table=table.name,
                table_id=table.table_id,
                partition_key=key,
                kind="major",
                max_seq=max_seq,
                score=1.0,
                reasons=["bench"],
            )
            meter.run(
                "planner", self.backends["planner"], lambda r=request: self.planner.plan_request(r)
            )
        tasks = [PlanTaskEvent.model_validate(e) for e in self.planned.take()]
        results: list[Any] = []
        for _ in range(len(tasks)):
            meter.run(
                "dispatcher",
                self.backends["dispatcher"],
                lambda: self.dispatcher.plan_task(tasks[0]),
            )
            results += self.ran.take()
            if len(results) >= len(tasks):
                break
        for result in results:
            event = TaskResultEvent.model_validate(result)
            meter.run(
                "committer",
                self.backends["committer"],
                lambda e=event: self.committer.task_result(e),
            )
        compactions = [CompactionEvent.model_validate(e) for e in self.committed.take()]
        for compaction in compactions:
            meter.run(
                "metrics: compactions",
                metrics,
                lambda c=compaction: reader.compaction_readings(c),
            )
        publisher = Publisher(self.publisher_db.conn)
        meter.run(
            "publisher", self.backends["publisher"], lambda: publisher.publish(table.table_id)
        )
        return len(compactions)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=41, help="tables folded (the first warms)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per table")
    parser.add_argument("--commits", type=int, default=5, help="change sets per table")
    parser.add_argument("--batch", type=int, default=200, help="rows per change set")
    parser.add_argument("--keys", type=int, default=2000, help="ids per table")
    parser.add_argument("--statements", action="store_true", help="list each step's statements")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.tables < 2:
        parser.error("--tables must be at least 2 (the first one warms up)")

    with bench_catalog() as catalog, ExitStack() as stack:
        made = tables_with_changes(catalog, "fold", args)
        services = Services(stack, catalog.settings)
        warm = Meter()
        services.fold(warm, *made[0])
        meter = Meter()
        plans = commits = 0
        with meter.counting():
            for table, events in made[1:]:
                plans += services.fold(meter, table, events)
                commits += len(events)
    per = {step: (commits if step == "metrics: commits" else plans) for step in STEPS}
    steps = {
        step: {
            "per": "commit event" if step == "metrics: commits" else "plan",
            "statements": round(meter.statements[step] / max(per[step], 1), 1),
            "client_ms": round(meter.client_s[step] * 1000 / max(per[step], 1), 2),
            "postgres_ms": round(meter.server_s[step] * 1000 / max(per[step], 1), 2),
        }
        for step in STEPS
    }
    out: dict[str, Any] = {
        "benchmark": "bench/service_cost.py",
        "command": "bench/service_cost.py " + " ".join(sys.argv[1:]),
        "tables": len(made) - 1,
        "plans": plans,
        "commit_events": commits,
        "steps": steps,
    }
    if args.statements:
        out["statements"] = {
            step: {
                q: round(n / max(per[step], 1), 2) for q, n in meter.by_query[step].most_common()
            }
            for step in STEPS
        }
    print(json.dumps(out, indent=2))
    fold = [s for s in STEPS if s != "metrics: commits"]
    print(
        f"{plans} plans of {len(made) - 1} tables; a plan: "
        + ", ".join(
            f"{s} {steps[s]['statements']} statements {steps[s]['client_ms']}+"
            f"{steps[s]['postgres_ms']} ms"
            for s in fold
        )
        + f"; all {sum(steps[s]['statements'] for s in fold):.1f} statements, "
        f"{sum(steps[s]['client_ms'] + steps[s]['postgres_ms'] for s in fold):.1f} ms",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
