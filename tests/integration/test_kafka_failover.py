"""Scaling for real: two processes of every service against a three-broker KRaft
cluster (topics with replication 3 and min.insync.replicas 2). While a producer
streams changes, the broker that leads the most of the run's partitions is killed
with SIGKILL and stays down; the producer keeps committing. Afterwards the work
settles: read() equals the model, no task is stuck, no plan is committed twice,
every service process is still running, compactions went on after the kill, and
every commit's event is in firn.commits exactly once (acknowledged writes survived
the leader's death; idempotent producers retried without duplicating). Last, the
killed node is started again and rejoins the cluster."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

import firn
from firn.kafka import Topics, admin_client, consumer, ensure_topics
from firn.postgres.connection import Connection
from firn.settings import FirnSettings
from firn_localstack import KafkaCluster
from tests.integration.backends import Backend
from tests.integration.cdc_workload import (
    PROPERTIES,
    SCHEMA,
    CdcProducer,
    assert_committed_once,
    wait_until_settled,
)
from tests.integration.conftest import REPO, private_settings
from tests.integration.service_processes import Services, running_services
from tests.waiting import eventually

SERVICES = [
    f"{name}#{n}" for name in ("metrics", "planner", "dispatcher", "committer") for n in (1, 2)
]
COMMITS = 90
KILL_AT = 30


@pytest.fixture(scope="module")
def cluster(stack_home: Path) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(REPO / ".firn" / "cache", stack_home / "kafka-cluster", size=3)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture
def cluster_settings(
    base_settings: FirnSettings,
    cluster: KafkaCluster,
    postgres: Backend,
    unique: str,
    tmp_path: Path,
) -> Iterator[FirnSettings]:
    """A private schema and topic prefix, on the cluster, replicated to every broker
    (the session's single broker is not needed)."""
    with private_settings(base_settings, cluster.bootstrap, postgres, unique) as settings:
        yield settings.model_copy(
            update={
                "topic_replication": 3,
                "warehouse": str(tmp_path / "warehouse"),
                "home": tmp_path / "home",
            }
        )


def _wait_for_services(conn: Connection, count: int, services: Services) -> None:
    """Until ``count`` service processes are registered (a dispatcher registers once
    its Spark session is up), so the broker dies while every service is working."""

    def registered() -> bool:
        services.assert_running()
        (live,) = conn.execute(
            "SELECT count(*) FROM service_instance WHERE stopped_at IS NULL"
        ).fetchone() or (0,)
        return bool(live >= count)

    eventually(
        registered,
        timeout=300,  # two Spark sessions start on a small machine
        what=f"{count} services registered",
        every=0.5,
        describe=services.logs,
    )


def _busiest_leader(settings: FirnSettings, topics: tuple[str, ...]) -> int:
    """The broker id that leads the most partitions of ``topics``."""
    metadata = admin_client(settings).list_topics(timeout=10)
    leaders = Counter(
        partition.leader
        for name in topics
        for partition in metadata.topics[name].partitions.values()
    )
    return leaders.most_common(1)[0][0]


def _commit_events(settings: FirnSettings, topic: str, group: str) -> Counter[int]:
    """How many times each seq's commit event is in ``topic``, read to its end."""
    reader = consumer(settings, group_id=group)
    metadata = reader.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
    ends = {tp.partition: reader.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions}
    reader.assign([TopicPartition(topic, p, 0) for p in ends])
    seen: Counter[int] = Counter()
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 60
    while len(done) < len(ends) and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is None or message.error() is not None:
            continue
        seen[json.loads(message.value() or b"{}")["seq"]] += 1
        if (message.offset() or 0) + 1 >= ends[message.partition() or 0]:
            done.add(message.partition() or 0)
    reader.close()
    assert len(done) == len(ends), f"read {sum(seen.values())} events, not to the end"
    return seen


def test_two_of_every_service_lose_nothing_when_a_broker_dies(
    cluster: KafkaCluster, cluster_settings: FirnSettings, tmp_path: Path, unique: str
) -> None:
    settings = cluster_settings
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, SERVICES, FIRN_METRICS_CHECK_INTERVAL="5") as services,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        conn = catalog.conn
        _wait_for_services(conn, len(SERVICES), services)
        workload = CdcProducer(table, seed=31)
        killed: dict[str, Any] = {}

        def kill_a_leader(n: int) -> None:
            services.assert_running()
            if n == KILL_AT:
                victim = _busiest_leader(settings, topics.all())
                (killed["at"],) = conn.execute("SELECT now()").fetchone() or (None,)
                cluster.kill_node(victim)
                killed["node"] = victim

        workload.run(commits=COMMITS, per_second=8, between=kill_a_leader)
        assert killed, "no broker was killed"
        wait_until_settled(table, services, timeout=240)
        workload.check()
        assert_committed_once(conn, table.table_id)
        (after_kill,) = conn.execute(
            "SELECT count(*) FROM compaction_plan WHERE table_id = %s "
            "AND state = 'Committed' AND updated_at > %s",
            (table.table_id, killed["at"]),
        ).fetchone() or (0,)
        assert after_kill > 0, "no compaction committed after the broker died"
        services.assert_running()

        commit_seqs = [
            seq
            for (seq,) in conn.execute(
                "SELECT seq FROM snapshot WHERE table_id = %s AND kind = 'commit'",
                (table.table_id,),
            ).fetchall()
        ]
        assert len(commit_seqs) == COMMITS
        events = _commit_events(settings, topics.commits, f"events-{unique}")
        assert set(events) == set(commit_seqs), "commit events lost"
        assert set(events.values()) == {1}, "commit events duplicated"

        # The killed node comes back as the same broker (ports, storage, voter id).
        cluster.start_node(killed["node"])
        assert cluster.node(killed["node"]).running
