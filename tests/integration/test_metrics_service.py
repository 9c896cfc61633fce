"""The metrics service as a real process (Faust worker) on the real stack: commit
events become plan requests when the triggers fire; replayed commit events change
nothing; a malformed event is parked in the DLQ and the service carries on; the
periodic catalog check finds commits whose events never reached Kafka."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import firn
from firn.kafka import Topics, consumer, ensure_topics, producer
from firn.settings import FirnSettings
from firn_services.metrics.app import changelog_topic
from firn_services.metrics.handlers import table_partition
from tests.integration.service_processes import running_services

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
# One node, so one commit is one change file per type; a node with more than two
# unmerged change files is due for a minor compaction, and a first commit makes the
# partition due (no major.change-bytes-lowest to wait under).
PROPS = {
    "change.buckets": 1,
    "base.buckets": 1,
    "minor.file-count": 2,
    "major.change-bytes-lowest": 0,
}
QUIET = {**PROPS, "major.change-bytes-lowest": "1GiB"}
"""One commit of a few rows never makes a partition of such a table due: its first fold
waits for minor.file-count runs (``firn.model.triggers.worth_folding``)."""


class Tail:
    """Reads a topic from the start, remembering everything seen."""

    def __init__(self, settings: FirnSettings, topic: str, group: str) -> None:
        self.reader = consumer(settings, group_id=group)
        self.reader.subscribe([topic])
        self.seen: list[dict[str, Any]] = []

    def until(self, count: int, timeout: float, services: Any = None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            if services is not None:
                services.assert_running()
            message = self.reader.poll(0.5)
            if message is not None and message.error() is None:
                self.seen.append(json.loads(message.value()))
        return self.seen

    def close(self) -> None:
        self.reader.close()


@pytest.fixture
def tail(settings: FirnSettings) -> Iterator[Callable[[str, str], Tail]]:
    """Makes Tails and closes them whatever the test did: a consumer left to the garbage
    collector after the broker is gone can spin in librdkafka's destroy for good."""
    made: list[Tail] = []

    def make(topic: str, group: str) -> Tail:
        made.append(Tail(settings, topic, group))
        return made[-1]

    yield make
    for each in made:
        each.close()


def _upsert(table: firn.Table, ids: range, tag: str) -> int:
    return table.upsert(pa.table({"id": list(ids), "v": [tag] * len(ids)}))


def test_commit_events_become_plan_requests_once(
    settings: FirnSettings, tmp_path: Path, unique: str, tail: Callable[[str, str], Tail]
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    requests = tail(topics.plan_requests, f"requests-{unique}")
    dlq = tail(topics.dlq, f"dlq-{unique}")
    commits = tail(topics.commits, f"commits-{unique}")
    with (
        firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog,
        running_services(settings, tmp_path, ["metrics"]) as services,
    ):
        table = catalog.create_table("events", SCHEMA, ["id"], [], PROPS)
        # Stop the partition from being due merely because it never had a major.
        catalog.conn.execute(
            "INSERT INTO catalog_partition (table_id, partition_key, partition_values, "
            "last_major_at) VALUES (%s, '', '{}', now())",
            (table.table_id,),
        )
        for n in range(2):
            _upsert(table, range(n, 50, 2), f"v{n}")
        early = requests.until(1, timeout=8, services=services)
        assert early == [], services.logs()  # 2 runs per node: not due
        _upsert(table, range(0, 10), "v2")
        got = requests.until(1, timeout=90, services=services)
        assert len(got) == 1, services.logs()
        request = got[0]
        assert (request["table"], request["partition_key"], request["kind"]) == (
            "events",
            "",
            "minor",
        )
        assert request["max_seq"] == 3
        assert request["reasons"] == ["a node has 3 sorted runs > 2"]
        assert request["score"] > 0

        # Replayed commit events and a malformed one: nothing new is requested, the
        # malformed event is parked with its reason, and the service keeps going.
        replay = producer(settings)
        for event in commits.until(3, timeout=30):
            replay.produce(topics.commits, key=b"events", value=json.dumps(event).encode())
        replay.produce(topics.commits, key=b"events", value=b'{"event_type": "commit", "seq": -1}')
        replay.flush(10)
        letters = dlq.until(1, timeout=60, services=services)
        assert len(letters) == 1
        assert letters[0]["service"] == "metrics"
        assert letters[0]["source_topic"] == topics.commits
        assert letters[0]["reason"].startswith("commit event invalid")
        assert requests.until(2, timeout=5, services=services) == got

        # A second table is still served after all that.
        other = catalog.create_table("other", SCHEMA, ["id"], [], PROPS)
        _upsert(other, range(5), "x")
        got = requests.until(2, timeout=60, services=services)
        assert [r["table"] for r in got] == ["events", "other"]
        assert got[1]["kind"] == "major"  # never compacted: the interval rule fires


def test_the_periodic_check_finds_commits_without_events(
    settings: FirnSettings, tmp_path: Path, unique: str, tail: Callable[[str, str], Tail]
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    requests = tail(topics.plan_requests, f"requests-{unique}")
    silent = settings.model_copy(update={"kafka_bootstrap": None})
    with (
        firn.connect(warehouse=str(tmp_path / "wh"), settings=silent) as catalog,
        running_services(
            settings, tmp_path, ["metrics"], FIRN_METRICS_CHECK_INTERVAL="3"
        ) as services,
    ):
        assert catalog.tables_catalog.publisher is None
        table = catalog.create_table("quiet", SCHEMA, ["id"], [], PROPS)
        _upsert(table, range(20), "a")
        got = requests.until(1, timeout=90, services=services)
        assert len(got) == 1, services.logs()
        assert (got[0]["table"], got[0]["kind"], got[0]["max_seq"]) == ("quiet", "major", 1)


def test_commit_events_land_on_their_tables_partition_and_a_foreign_one_is_still_tracked(
    settings: FirnSettings, tmp_path: Path, unique: str, tail: Callable[[str, str], Tail]
) -> None:
    """The metrics service tracks a commit event where it lands when that is its
    table's partition (``table_partition``), which is where Firn's producers put it:
    checked here on the broker for several tables. A commit event that another
    partitioner put elsewhere is sent on through the updates topic and counted all
    the same: three commit events of one table, produced by hand to the partition
    after its own, still make the plan request."""
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    partitions = settings.topic_partitions
    assert partitions > 1, "one partition leaves no other to land on"
    # The events of the first part go to a side topic, so the service never sees
    # them where Firn put them.
    side = settings.model_copy(update={"topic_prefix": f"{settings.topic_prefix}side."})
    side_topics = Topics.from_settings(side)
    ensure_topics(side, [side_topics.commits])
    landed = consumer(side, group_id=f"where-{unique}")
    landed.subscribe([side_topics.commits])
    requests = tail(topics.plan_requests, f"requests-{unique}")
    names = [f"t{i}" for i in range(8)]
    try:
        with firn.connect(warehouse=str(tmp_path / "wh"), settings=side) as catalog:
            for name in names:
                # Not due after their one commit: the service's first catalog check must
                # not request them before the foreign table's events are tracked.
                _upsert(catalog.create_table(name, SCHEMA, ["id"], [], QUIET), range(3), "a")
            foreign = catalog.create_table("foreign", SCHEMA, ["id"], [], PROPS)
            for n in range(3):
                _upsert(foreign, range(n, 30, 3), f"v{n}")
        seen: dict[str, list[tuple[int, bytes]]] = {}
        deadline = time.monotonic() + 30
        while sum(map(len, seen.values())) < len(names) + 3 and time.monotonic() < deadline:
            message = landed.poll(0.5)
            if message is not None and message.error() is None:
                event = json.loads(message.value())
                seen.setdefault(event["table"], []).append((message.partition(), message.value()))
    finally:
        landed.close()
    assert {name: [p for p, _ in seen[name]] for name in names} == {
        name: [table_partition(name, partitions)] for name in names
    }
    assert len({table_partition(name, partitions) for name in names}) > 1

    own = table_partition("foreign", partitions)
    elsewhere = (own + 1) % partitions
    with running_services(settings, tmp_path, ["metrics"]) as services:
        hand = producer(settings)
        for _, value in seen["foreign"]:
            hand.produce(topics.commits, key=b"foreign", value=value, partition=elsewhere)
        assert hand.flush(10) == 0
        got = requests.until(1, timeout=90, services=services)
        assert [(r["table"], r["kind"]) for r in got] == [("foreign", "major")], services.logs()
    # They were sent on to the table's own partition of the updates topic.
    sent_on = consumer(settings, group_id=f"updates-{unique}")
    sent_on.subscribe([topics.metrics_updates])
    try:
        forwarded: list[int] = []
        deadline = time.monotonic() + 30
        while len(forwarded) < 3 and time.monotonic() < deadline:
            message = sent_on.poll(0.5)
            if message is not None and message.error() is None:
                found = json.loads(message.value())
                if all(u["table"] == "foreign" and u["kind"] == "commit" for u in found):
                    forwarded.append(message.partition())
    finally:
        sent_on.close()
    assert forwarded == [own] * 3


def test_each_tracked_partition_is_written_to_its_tables_kafka_partition(
    settings: FirnSettings, tmp_path: Path, unique: str
) -> None:
    """The Faust table's changelog keeps each partition's entry on its table's Kafka
    partition, where the table's commit events land, so each member sharing the load
    holds its own tables' entries. ``track`` takes its events a batch at a time, from
    several Kafka partitions at once: eight tables on different partitions commit
    before the service starts, so their events arrive together."""
    topics = Topics.from_settings(settings)
    partitions = settings.topic_partitions
    changelog = changelog_topic(settings)
    ensure_topics(settings, topics.all())
    ensure_topics(settings, (changelog,), config={"cleanup.policy": "compact"})
    names = [f"spread{i}" for i in range(8)]
    assert len({table_partition(name, partitions) for name in names}) > 1
    named: dict[int, str] = {}
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog:
        for name in names:
            table = catalog.create_table(name, SCHEMA, ["id"], [], QUIET)
            _upsert(table, range(3), "a")
            named[table.table_id] = name
    reader = consumer(settings, group_id=f"changelog-{unique}")
    reader.subscribe([changelog])
    written: dict[str, set[int]] = {}
    try:
        with running_services(settings, tmp_path, ["metrics"]) as services:
            deadline = time.monotonic() + 90
            while len(written) < len(names) and time.monotonic() < deadline:
                services.assert_running()
                message = reader.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                table_id = int(message.key().decode().strip('"').split("/")[0])
                if table_id in named:
                    written.setdefault(named[table_id], set()).add(message.partition())
            logs = services.logs()
    finally:
        reader.close()
    assert written == {name: {table_partition(name, partitions)} for name in names}, logs
