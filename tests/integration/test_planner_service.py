"""The planner's handler on the real stack: a plan request becomes a stored plan
whose tasks are announced on firn.plan-tasks and released; repeats plan nothing new."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import psycopg
import pyarrow as pa
import pytest
from confluent_kafka import Producer

import firn
from firn.errors import ConfigError, EventMismatchError
from firn.events.plans import PlanRequestEvent
from firn.events.wire import as_event
from firn.kafka import Topics, ensure_topics, producer
from firn.settings import FirnSettings
from firn_services.planner.handlers import Planner
from tests.hash_tree import HASH_TREE
from tests.waiting import messages_on

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
EAGER = {"base.buckets": 2, "major.change-bytes-lowest": 0}
"""A few small commits make the partition due (the planner checks a request against the
partition's triggers), as they did before the default floor of 64 KiB a node."""


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def drain(settings: FirnSettings, topic: str, group: str, expect: int) -> list[Any]:
    """The events on ``topic``: waits for ``expect`` of them, then 2 s more for extras."""
    read = messages_on(settings, topic, group, expect=expect, extra_seconds=2)
    return [json.loads(m.value()) for m in read]


def plan_request(
    table: firn.Table,
    kind: str = "major",
    max_seq: int = 3,
    score: float = 1.0,
    partition_key: str = "",
    **fields: Any,
) -> PlanRequestEvent:
    """A plan request for a partition of ``table`` (the unpartitioned one unless
    named), as metrics sends one."""
    return PlanRequestEvent(
        table=table.name,
        table_id=table.table_id,
        partition_key=partition_key,
        kind=kind,  # type: ignore[arg-type]
        max_seq=max_seq,
        score=score,
        reasons=fields.pop("reasons", []),
        **fields,
    )


def test_a_plan_request_is_planned_announced_and_released_once(
    settings: FirnSettings, catalog: firn.Catalog, unique: str
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table = catalog.create_table("requested", SCHEMA, ["id"], [], {**EAGER, **HASH_TREE})
    for n in range(3):
        table.upsert(
            pa.table({"id": list(range(n, 100, 3)), "v": [f"v{n}"] * len(range(n, 100, 3))})
        )
    real = producer(settings)
    claimable_when_sent: list[str] = []

    class Watching:
        """The producer, noting the task's state when its event goes out: an idle
        dispatcher reads it at once, and a wake-up finding an Init task does nothing."""

        def produce(self, topic: str, key: bytes, value: bytes) -> None:
            task_id = json.loads(value)["task_id"]
            (state,) = catalog.conn.execute(
                "SELECT state FROM compaction_task WHERE task_id = %s", (task_id,)
            ).fetchone() or (None,)
            claimable_when_sent.append(state)
            real.produce(topic, key=key, value=value)

        def flush(self, timeout: float) -> int:
            return real.flush(timeout)

    planner = Planner(catalog, cast(Producer, Watching()), topics.plan_tasks)
    request = plan_request(table, score=1.5, reasons=["small files 24 >= 24"])
    planner.plan_request(as_event(json.loads(request.to_json())))
    assert claimable_when_sent == ["Pending"] * 2
    planner.plan_request(as_event(json.loads(request.to_json())))  # redelivered: nothing new
    assert claimable_when_sent == ["Pending"] * 2, "announced again by the same process"
    # Redelivered after a restart (a crash may have fallen between releasing and
    # announcing): the new process announces the waiting tasks again.
    planner = Planner(catalog, cast(Producer, Watching()), topics.plan_tasks)
    planner.plan_request(as_event(json.loads(request.to_json())))
    assert claimable_when_sent == ["Pending"] * 4

    plans = catalog.conn.execute(
        "SELECT plan_id, state, to_seq, score FROM compaction_plan WHERE table_id = %s",
        (table.table_id,),
    ).fetchall()
    assert len(plans) == 1
    plan_id, state, to_seq, score = plans[0]
    assert (state, to_seq, score) == ("Planned", 3, 1.5)
    tasks = catalog.conn.execute(
        "SELECT task_id, state FROM compaction_task WHERE plan_id = %s ORDER BY ordinal",
        (plan_id,),
    ).fetchall()
    assert [s for _, s in tasks] == ["Pending", "Pending"]

    events = drain(settings, topics.plan_tasks, f"tasks-{unique}", expect=2 * len(tasks))
    # Announced by the request and again after the restart; claims make that harmless.
    assert sorted(e["task_id"] for e in events) == sorted([t for t, _ in tasks] * 2)
    assert all(e["plan_id"] == plan_id and e["attempt"] == 0 for e in events)

    # Newer changes while the plan waits: it stays queued and is not announced again
    # (a backlog asked at every commit), except a task a crash left Init.
    table.upsert(pa.table({"id": [1], "v": ["newer"]}))
    newer = plan_request(table, max_seq=4, score=1.5)
    planner.plan_request(as_event(json.loads(newer.to_json())))
    assert len(claimable_when_sent) == 4
    catalog.conn.execute(
        "UPDATE compaction_task SET state = 'Init' WHERE task_id = %s", (tasks[0][0],)
    )
    planner.plan_request(as_event(json.loads(newer.to_json())))
    assert claimable_when_sent[4:] == ["Pending"]
    assert catalog.conn.execute(
        "SELECT count(*) FROM compaction_plan WHERE table_id = %s", (table.table_id,)
    ).fetchone() == (1,)


def test_bad_and_unknown_requests(settings: FirnSettings, catalog: firn.Catalog) -> None:
    topics = Topics.from_settings(settings)
    planner = Planner(catalog, producer(settings), topics.plan_tasks)
    request = PlanRequestEvent(
        table="nowhere", table_id=99, partition_key="", kind="major", max_seq=1, score=0, reasons=[]
    )
    with pytest.raises(EventMismatchError, match="does not exist"):
        planner.plan_request(as_event(json.loads(request.to_json())))  # parked in the DLQ
    bad = {**json.loads(request.to_json()), "kind": "huge"}
    with pytest.raises(ConfigError, match="kind"):
        planner.plan_request(as_event(bad))  # the consume loop parks this in the DLQ
    assert catalog.conn.execute("SELECT count(*) FROM compaction_plan").fetchone() == (0,)


def test_a_request_that_disagrees_with_the_catalog_plans_nothing(
    settings: FirnSettings, catalog: firn.Catalog
) -> None:
    """Events are wake-ups: the partition and seq a request names must exist."""
    table = catalog.create_table("real", SCHEMA, ["id"], [], EAGER)
    other = catalog.create_table("other", SCHEMA, ["id"], [], EAGER)
    for n in range(3):
        table.upsert(pa.table({"id": [n], "v": ["x"]}))
    planner = Planner(catalog, producer(settings), Topics.from_settings(settings).plan_tasks)
    honest = plan_request(table)
    forged = [
        (honest.model_copy(update={"table": "other"}), "table 'other'"),
        (honest.model_copy(update={"table_id": other.table_id}), "partition ''"),
        (honest.model_copy(update={"partition_key": "day=1"}), "does not exist"),
        (honest.model_copy(update={"max_seq": 4}), "beyond the greatest committed"),
    ]
    for event, reason in forged:
        with pytest.raises(EventMismatchError, match=reason):
            planner.plan_request(as_event(json.loads(event.to_json())))
    assert catalog.conn.execute("SELECT count(*) FROM compaction_plan").fetchone() == (0,)
    planner.plan_request(as_event(json.loads(honest.to_json())))
    assert catalog.conn.execute("SELECT count(*) FROM compaction_plan").fetchone() == (1,)


def test_a_request_already_served_by_a_committed_plan_plans_nothing(
    settings: FirnSettings, catalog: firn.Catalog
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table = catalog.create_table("served", SCHEMA, ["id"], [], EAGER)
    for n in range(3):
        table.upsert(pa.table({"id": [n, n + 10], "v": [f"v{n}"] * 2}))
    assert firn.compact(table, engine="local")["plans"][0]["outcome"] == "committed"
    planner = Planner(catalog, producer(settings), topics.plan_tasks)

    def request(kind: str, max_seq: int) -> Any:
        event = plan_request(table, kind, max_seq, reasons=["replayed"])
        return as_event(json.loads(event.to_json()))

    def plans() -> list[tuple[str, str]]:
        rows = catalog.conn.execute(
            "SELECT kind, state FROM compaction_plan WHERE table_id = %s ORDER BY plan_id",
            (table.table_id,),
        ).fetchall()
        return [(k, s) for k, s in rows]

    planner.plan_request(request("major", 3))  # replayed: the major up to 3 is done
    planner.plan_request(request("minor", 2))  # a major serves a minor too
    assert plans() == [("major", "Committed")]
    table.upsert(pa.table({"id": [99], "v": ["new"]}))
    planner.plan_request(request("major", 4))  # new changes: planned
    assert plans() == [("major", "Committed"), ("major", "Planned")]


def test_a_replayed_request_a_merge_since_answered_plans_nothing(
    settings: FirnSettings, catalog: firn.Catalog
) -> None:
    """Under the default ``major.change-bytes-lowest`` a partition's runs collect, and a
    minor merge can take it back under its triggers: a major request from before that
    merge, replayed, is no longer due, where planning it would fold every unit (a major
    request folds them all when none is due). A manual request still plans, and so does
    a request once the partition is due again."""
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table = catalog.create_table("merged", SCHEMA, ["id"], [], {"minor.file-count": 3})
    noise = [f"{n * 7919 % 100_003:08x}{n * 104_729 % 1_000_003:08x}" for n in range(20_000)]
    table.upsert(pa.table({"id": range(20_000), "v": noise}))  # too varied to compress
    firn.compact(table, kind="major", engine="local")  # a base the changes stay small against
    for n in range(4):
        table.upsert(pa.table({"id": [n, n + 10], "v": [f"v{n}"] * 2}))
    (part,) = table.status()["partitions"]
    assert part["due"] == "minor", part["reasons"]
    merge = firn.compact(table, kind="minor", engine="local")["plans"]
    assert [p["outcome"] for p in merge] == ["committed"]
    (part,) = table.status()["partitions"]
    assert (part["due"], part["max_seq"], part["max_merged_seq"]) == (None, 5, 1)
    planner = Planner(catalog, producer(settings), topics.plan_tasks)

    def majors() -> int:
        (n,) = catalog.conn.execute(
            "SELECT count(*) FROM compaction_plan WHERE table_id = %s AND kind = 'major'",
            (table.table_id,),
        ).fetchone() or (0,)
        return int(n)

    planner.plan_request(plan_request(table, "major", 5, reasons=["replayed"]))
    assert majors() == 1  # the first fold only
    planner.plan_request(plan_request(table, "major", 5, reasons=["manual"], scope="all"))
    assert majors() == 2
    # Still unmerged: the manual plan waits. A due request after it is covered, and
    # nothing is planned twice.
    planner.plan_request(plan_request(table, "major", 5, reasons=["due"]))
    assert majors() == 2


def test_small_base_files_are_planned_though_every_seq_is_merged(
    settings: FirnSettings, catalog: firn.Catalog
) -> None:
    """Keys in order fold without rewriting older base, one small base file a fold; once
    they pass the small-file rule a major request plans their rewrite, though a
    committed plan already reached its max_seq, and the table reads the same after."""
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    properties = {"base.buckets": 1, "major.file-count": 4}
    table = catalog.create_table("appended", SCHEMA, ["id"], [], properties)
    for n in range(5):
        ids = list(range(10 * n, 10 * n + 10))
        table.upsert(pa.table({"id": ids, "v": [f"v{n}"] * 10}))
        assert firn.compact(table, engine="local")["plans"][-1]["outcome"] == "committed"
    base = table.files().to_pylist()
    assert len(base) == 5, "one file per fold"
    assert {f["store"] for f in base} == {"base"}
    planner = Planner(catalog, producer(settings), topics.plan_tasks)
    request = plan_request(table, max_seq=5, reasons=["small base files 5 >= 4"])
    planner.plan_request(as_event(json.loads(request.to_json())))
    (plan_id, to_seq) = catalog.conn.execute(
        "SELECT plan_id, to_seq FROM compaction_plan WHERE table_id = %s AND state = 'Planned'",
        (table.table_id,),
    ).fetchone() or (None, None)
    assert plan_id is not None, "the small base files were not planned"
    assert to_seq == 5
    (inputs,) = catalog.conn.execute(
        "SELECT sum(jsonb_array_length(spec->'base_files')) FROM compaction_task "
        "WHERE plan_id = %s",
        (plan_id,),
    ).fetchone() or (0,)
    assert inputs == 5, "every small base file is rewritten"


def test_a_request_gathers_the_tables_other_due_partitions(
    settings: FirnSettings, catalog: firn.Catalog, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``compaction.gather-partitions`` a request plans the table's other due
    partitions with its own, most in need first, up to the number; a later request
    for a gathered partition finds it planned and plans nothing more."""
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    schema = pa.schema(
        [pa.field("region", pa.string(), nullable=False), *(SCHEMA.field(n) for n in ("id", "v"))]
    )
    properties = {"base.buckets": 1, "compaction.gather-partitions": 3, "minor.file-count": 2}
    table = catalog.create_table("gathering", schema, ["region", "id"], ["region"], properties)
    for n in range(3):
        # Region d gets one row a commit, the others more: d is the least in need.
        regions = [r for r in "abcd" for _ in range(1 if r == "d" else 5)]
        ids = list(range(len(regions)))
        table.upsert(pa.table({"region": regions, "id": ids, "v": [f"v{n}"] * len(ids)}))
    due = {p["partition"]: p["due"] for p in table.status()["partitions"]}
    assert due == dict.fromkeys(("region=a", "region=b", "region=c", "region=d"), "major")
    planner = Planner(catalog, producer(settings), topics.plan_tasks)

    def request(partition: str) -> Any:
        event = plan_request(table, partition_key=partition, reasons=["asked"])
        return as_event(json.loads(event.to_json()))

    def plans() -> dict[str, tuple[str, str]]:
        rows = catalog.conn.execute(
            "SELECT partition_key, state, reason->>'trigger' FROM compaction_plan "
            "WHERE table_id = %s",
            (table.table_id,),
        ).fetchall()
        return {key: (state, trigger) for key, state, trigger in rows}

    planner.plan_request(request("region=b"))
    assert plans() == {
        "region=b": ("Planned", "metrics"),
        "region=a": ("Planned", "gathered"),
        "region=c": ("Planned", "gathered"),
    }
    announced = drain(settings, topics.plan_tasks, f"gathered-{unique}", expect=3)
    assert sorted(e["partition_key"] for e in announced) == ["region=a", "region=b", "region=c"]
    tasks = catalog.conn.execute(
        "SELECT DISTINCT t.state FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %s",
        (table.table_id,),
    ).fetchall()
    assert tasks == [("Pending",)], "every gathered task is released before it is announced"

    statements: list[object] = []
    execute = psycopg.Cursor.execute

    def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(query)
        return execute(cursor, query, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(psycopg.Cursor, "execute", counted)
        planner.plan_request(request("region=a"))  # gathered already: covered
    assert len(statements) == 1, "a plan this planner announced answers in one statement"
    # A planner that did not announce it (restarted) reads the waiting tasks to
    # announce them, and plans nothing either.
    Planner(catalog, producer(settings), topics.plan_tasks).plan_request(request("region=c"))
    planner.plan_request(request("region=d"))  # left out: planned on its own request
    assert plans() == {
        "region=b": ("Planned", "metrics"),
        "region=a": ("Planned", "gathered"),
        "region=c": ("Planned", "gathered"),
        "region=d": ("Planned", "metrics"),
    }
