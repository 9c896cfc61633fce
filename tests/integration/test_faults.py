"""Faults on the real stack, with the four services as separate processes.

While a producer streams changes: kill -9 the executor-dispatcher while it runs a
task, the committer inside a plan commit transaction, the planner inside the
transaction that stores a plan (each held there by a row lock the test takes), and
metrics; restart each. Malformed events are sent to three services'
topics. Afterwards all work completes, read() equals the model, no task is stuck, no
plan is committed twice, and replaying every event of the run changes nothing.

Two executor-dispatchers share the work without running a task to Prepared twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import firn
from firn.commands.compact import request_compaction
from firn.kafka import Topics, consumer, ensure_topics, producer
from firn.kafka.lag import group_lag
from firn.postgres import connect
from firn.postgres.connection import Connection
from firn.settings import FirnSettings
from tests.integration.cdc_workload import (
    PROPERTIES,
    SCHEMA,
    CdcProducer,
    assert_committed_once,
    wait_until_settled,
)
from tests.integration.service_processes import running_services
from tests.waiting import eventually, messages_on

SERVICES = ["metrics", "planner", "dispatcher", "committer"]
ENV = {"FIRN_METRICS_CHECK_INTERVAL": "5"}


FREE_PARTITIONS = (
    "SELECT partition_key FROM catalog_partition c WHERE table_id = %s AND NOT EXISTS "
    "(SELECT 1 FROM compaction_plan p WHERE p.table_id = c.table_id "
    "AND p.partition_key = c.partition_key AND p.state IN ('Planned', 'Executing', "
    "'Committing'))"
)
"""A table's partitions that no open plan holds."""


def _exists(conn: Connection, sql: str, *args: Any) -> bool:
    return conn.execute(sql, args).fetchone() is not None


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    eventually(condition, timeout=timeout, what=what, every=0.05)


@contextmanager
def _holding(settings: FirnSettings, lock: str, *args: Any) -> Iterator[None]:
    """Hold row locks in a transaction of our own until the block ends."""
    with connect(settings) as holder, holder.transaction():
        holder.execute(lock, args)
        yield


def _waiting(conn: Connection, application: str) -> bool:
    """Whether a connection of that service waits for a lock (inside a transaction)."""
    return _exists(
        conn,
        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock' AND state = 'active'",
        application,
    )


def _state(conn: Connection, table_id: int) -> dict[str, Any]:
    """What must not change when events are replayed."""
    snapshots = conn.execute(
        "SELECT kind, count(*) FROM snapshot WHERE table_id = %s GROUP BY kind ORDER BY kind",
        (table_id,),
    ).fetchall()
    plans = conn.execute(
        "SELECT state, count(*) FROM compaction_plan WHERE table_id = %s "
        "GROUP BY state ORDER BY state",
        (table_id,),
    ).fetchall()
    (files,) = conn.execute(
        "SELECT count(*) FROM data_file WHERE table_id = %s AND removed_snapshot IS NULL",
        (table_id,),
    ).fetchone() or (0,)
    return {"snapshots": snapshots, "plans": plans, "live files": files}


def _replay_everything(settings: FirnSettings, topics: Topics, group: str) -> int:
    """Re-send every event of the run on its own topic, in order; returns how many."""
    names = [
        topics.commits,
        topics.plan_requests,
        topics.plan_tasks,
        topics.task_results,
        topics.compactions,
    ]
    reader = consumer(settings, group_id=group)
    reader.subscribe(names)
    events: list[tuple[str, bytes | None, bytes]] = []
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 5:
        message = reader.poll(0.5)
        if message is None or message.error() is not None:
            continue
        quiet_since = time.monotonic()
        value = message.value()
        topic = message.topic()
        if value is not None and topic is not None and value.startswith(b"{"):
            events.append((topic, message.key(), value))
    reader.close()
    out = producer(settings)
    for topic, key, value in events:
        out.produce(topic, key=key, value=value)
        out.poll(0)
    assert out.flush(30) == 0
    return len(events)


def test_killed_services_lose_nothing_and_replays_change_nothing(
    stack_settings: FirnSettings, tmp_path: Path, unique: str
) -> None:
    settings = stack_settings
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, SERVICES, **ENV) as services,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        conn = catalog.conn
        workload = CdcProducer(table, seed=11)
        killed: dict[str, str] = {}
        in_plan = "SELECT 1 FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        in_plan += "WHERE p.table_id = %s AND t.state = %s"

        def kill_blocked(service: str, locked: str, what: str) -> None:
            """Kill ``service`` while it waits inside a transaction for rows of
            ``locked`` (this table's) that the test holds."""
            lock = f"SELECT 1 FROM {locked} WHERE table_id = %s FOR UPDATE"
            with _holding(settings, lock, table.table_id):
                _wait_for(lambda: _waiting(conn, f"firn-{service}"), 90, what)
                services.kill(service)

        def kill_planner_storing_a_plan() -> None:
            """Hold partitions no open plan holds: the planner's next plan for one
            blocks inside its transaction, after drafting and before storing anything.
            The producer is paused here, so commit once more (something to compact)
            and ask for their compaction as metrics would. Partitions with an open
            plan are left alone: the planner would only answer busy, and their plan
            could not commit while its row was held. If the services planned the new
            commit first, or nothing was asked for, let go and try again."""
            deadline = time.monotonic() + 120
            while True:
                assert time.monotonic() < deadline, "never saw a plan being stored"
                workload.commit_one()
                with connect(settings) as holder, holder.transaction():
                    rows = holder.execute(f"{FREE_PARTITIONS} FOR UPDATE", (table.table_id,))
                    locked = {key for (key,) in rows.fetchall()}
                    # Read again: a plan stored while the lock was awaited counts.
                    rows = holder.execute(FREE_PARTITIONS, (table.table_id,))
                    free = sorted(locked & {key for (key,) in rows.fetchall()})
                    asked = [
                        r
                        for key in free
                        for r in request_compaction(settings, table, key, "major").data["requested"]
                    ]
                    waited = time.monotonic() + 15
                    while asked and time.monotonic() < waited:
                        if _waiting(conn, "firn-planner"):
                            services.kill("planner")
                            return
                        time.sleep(0.05)
                time.sleep(0.5)

        def faults(n: int) -> None:
            services.assert_running()
            if n == 60:
                _wait_for(
                    lambda: _exists(conn, in_plan, table.table_id, "Executing"),
                    60,
                    "an Executing task",
                )
                services.kill("dispatcher")
                killed["dispatcher"] = "while a task was Executing"
            elif n == 75:
                services.start("dispatcher")
            elif n == 100:
                # Hold the table row: the committer's next plan commit blocks inside its
                # transaction (producers take it too, but this one is paused here).
                kill_blocked("committer", "catalog_table", "a plan commit")
                killed["committer"] = "inside a plan commit transaction"
            elif n == 120:
                services.start("committer")
            elif n == 140:
                kill_planner_storing_a_plan()
                killed["planner"] = "inside a plan transaction"
            elif n == 160:
                services.start("planner")
            elif n == 180:
                services.kill("metrics")  # its Faust table comes back from the changelog
                killed["metrics"] = "mid-stream"
            elif n == 190:
                services.start("metrics")
            elif n == 170:
                garbage = producer(settings)
                for topic in (topics.plan_requests, topics.plan_tasks, topics.task_results):
                    garbage.produce(topic, key=b"orders/x", value=b'{"event_type": "plan-task"')
                assert garbage.flush(10) == 0

        workload.run(commits=220, per_second=8, between=faults)
        assert set(killed) == {"dispatcher", "committer", "planner", "metrics"}
        wait_until_settled(table, services, timeout=300)
        workload.check()
        assert_committed_once(conn, table.table_id)
        (failed,) = conn.execute(
            "SELECT count(*) FROM compaction_plan WHERE table_id = %s AND state = 'Failed'",
            (table.table_id,),
        ).fetchone() or (0,)
        assert failed == 0

        letters = _dead_letters(settings, topics, f"dlq-{unique}", expect=3)
        assert sorted(letter["service"] for letter in letters) == [
            "committer",
            "dispatcher",
            "planner",
        ]

        before = _state(conn, table.table_id)
        replayed = _replay_everything(settings, topics, f"replay-{unique}")
        assert replayed > 220
        _wait_until_consumed(settings, SERVICES, timeout=120)
        wait_until_settled(table, services, timeout=120)
        assert _state(conn, table.table_id) == before, "the replay changed something"
        workload.check()
        assert_committed_once(conn, table.table_id)


def _wait_until_consumed(settings: FirnSettings, services: list[str], timeout: float) -> None:
    """Wait until each service's consumer group has committed the end offset of every
    partition it reads, twice in a row a second apart: every event, including any its
    handlers published in turn, has been handled (offsets are stored after handling)."""
    topics = Topics.from_settings(settings).all()
    probes = {s: consumer(settings, group_id=f"{settings.topic_prefix}{s}") for s in services}
    deadline = time.monotonic() + timeout
    behind: dict[str, Any] = {}
    caught_up = 0
    while caught_up < 2:
        if time.monotonic() > deadline:
            raise AssertionError(f"still behind after {timeout:.0f}s: {behind}")
        time.sleep(1.0)
        lags = {s: group_lag(probe, topics) for s, probe in probes.items()}
        behind = {s: {tp: n for tp, n in lag.items() if n} for s, lag in lags.items()}
        behind = {s: lag for s, lag in behind.items() if lag}
        caught_up = caught_up + 1 if not behind else 0
    for probe in probes.values():
        probe.close()


def _dead_letters(
    settings: FirnSettings, topics: Topics, group: str, expect: int
) -> list[dict[str, Any]]:
    read = messages_on(settings, topics.dlq, group, expect=expect, timeout=30)
    return [json.loads(m.value()) for m in read]


def test_two_dispatchers_share_the_work(stack_settings: FirnSettings, tmp_path: Path) -> None:
    settings = stack_settings
    ensure_topics(settings, Topics.from_settings(settings).all())
    names = ["metrics", "planner", "dispatcher#1", "dispatcher#2", "committer"]
    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, names, **ENV) as services,
    ):
        services.wait_for_group("dispatcher", members=2)
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        # Eight partitions: their keys spread over every partition of the plan-tasks topic.
        days = [f"2026-11-{d:02d}" for d in range(10, 18)]
        workload = CdcProducer(table, seed=23, days=days)
        workload.run(commits=150, per_second=8, between=lambda n: services.assert_running())
        wait_until_settled(table, services, timeout=300)
        workload.check()
        conn = catalog.conn
        # Who ran what: every claim is a state_transition row naming its dispatcher.
        owners = conn.execute(
            "SELECT DISTINCT split_part(s.reason, ' ', 3) FROM state_transition s "
            "JOIN compaction_task t ON t.task_id = s.entity_id "
            "JOIN compaction_plan p USING (plan_id) "
            "WHERE s.machine = 'task' AND s.to_state = 'Executing' AND p.table_id = %s",
            (table.table_id,),
        ).fetchall()
        assert len(owners) == 2, f"one dispatcher did all the work: {owners}"
        (twice,) = conn.execute(
            "SELECT count(*) FROM (SELECT s.entity_id FROM state_transition s "
            "JOIN compaction_task t ON t.task_id = s.entity_id "
            "JOIN compaction_plan p USING (plan_id) "
            "WHERE s.machine = 'task' AND s.to_state = 'Prepared' AND p.table_id = %s "
            "GROUP BY s.entity_id HAVING count(*) > 1) x",
            (table.table_id,),
        ).fetchone() or (0,)
        assert twice == 0, "a task was run to Prepared twice"
        assert_committed_once(conn, table.table_id)
        services.assert_running()
