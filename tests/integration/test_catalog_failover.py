"""The catalog survives its primary: a primary with a synchronous streaming replica,
the services and a producer on libpq's multi-host URL (``target_session_attrs=
read-write``), the primary's postmaster killed with ``kill -9`` mid-stream and the
replica promoted. Every commit that returned before the failure is on the new
primary, the table equals the reference model, no service exits, and compaction
commits there again.

Whichever backend the other suites use, this one starts the local runner's servers
(two Postgres clusters and their replication are what it is about) and the suite's
Kafka."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

import firn
from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from firn_localstack import PostgresServer
from tests.integration.backends import Backend
from tests.integration.cdc_workload import PROPERTIES, SCHEMA, CdcProducer, wait_until_settled
from tests.integration.service_processes import running_services
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
SERVICES = ["metrics", "planner", "dispatcher", "committer"]
KILL_AFTER = 25
"""Commits before the primary dies."""
COMMITS = 60
PROMOTE_AFTER = 2.0
"""Seconds between the primary's death and the replica's promotion (an operator's,
or a failover manager's, reaction time)."""


@pytest.fixture
def pair() -> Iterator[tuple[PostgresServer, PostgresServer]]:
    # Inside the repo's .firn: the Postgres system user must reach the data folders.
    home = REPO / ".firn" / f"test-failover-{uuid.uuid4().hex[:8]}"
    primary = PostgresServer(home / "postgres" / "primary")
    replica = None
    primary.start()
    try:
        replica = PostgresServer(home / "postgres" / "replica", standby_of=primary.port)
        replica.start()
        primary.require_synchronous_standby()
        yield primary, replica
    finally:
        for server in (replica, primary):
            if server is not None:
                server.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_a_killed_primary_loses_no_commit_and_compaction_resumes_on_the_replica(
    pair: tuple[PostgresServer, PostgresServer],
    base_settings: FirnSettings,
    kafka: Backend,
    tmp_path: Path,
    unique: str,
) -> None:
    primary, replica = pair
    both = primary.url.replace(
        f"127.0.0.1:{primary.port}", f"127.0.0.1:{primary.port},127.0.0.1:{replica.port}"
    )
    settings = base_settings.model_copy(
        update={
            "database_url": SecretStr(both + "&target_session_attrs=read-write"),
            "kafka_bootstrap": kafka.address,
            "database_schema": f"test_{unique}",
            "topic_prefix": f"test-{unique}.",
            "warehouse": str(tmp_path / "warehouse"),
            "home": tmp_path / "home",
        }
    )
    ensure_topics(settings, Topics.from_settings(settings).all())
    killed_at: list[dt.datetime] = []
    first_commit_after: list[dt.datetime] = []

    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, SERVICES, FIRN_METRICS_CHECK_INTERVAL="5") as svc,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        producer = CdcProducer(table, seed=17)
        promoting = threading.Timer(PROMOTE_AFTER, replica.promote)

        def between(n: int) -> None:
            if n == KILL_AFTER - 1:
                primary.kill()
                killed_at.append(dt.datetime.now(dt.UTC))
                promoting.start()
            elif n == KILL_AFTER:
                first_commit_after.append(dt.datetime.now(dt.UTC))

        try:
            producer.run(commits=COMMITS, per_second=10, between=between)
        finally:
            promoting.join()
        svc.assert_running()
        wait_until_settled(table, svc, timeout=240)
        producer.check()

        def compacted_after_failover() -> dt.datetime | None:
            row = catalog.conn.execute(
                "SELECT min(created_at) FROM snapshot WHERE table_id = %s "
                "AND kind = 'compaction' AND created_at > %s",
                (table.table_id, killed_at[0]),
            ).fetchone()
            return None if row is None else row[0]

        compacted = eventually(
            compacted_after_failover, timeout=120, what="a compaction on the new primary"
        )
        svc.assert_running()
        (in_recovery,) = catalog.conn.execute("SELECT pg_is_in_recovery()").fetchone() or (None,)
        assert in_recovery is False, "the catalog connection is on the promoted replica"
        seconds = {
            "first commit": (first_commit_after[0] - killed_at[0]).total_seconds(),
            "first compaction": (compacted - killed_at[0]).total_seconds(),
        }
        print(
            f"\nfailover: {producer.commits} commits, none lost; after the primary's death "
            f"(promotion {PROMOTE_AFTER:g} s later) the first commit landed in "
            f"{seconds['first commit']:.1f} s, the first compaction in "
            f"{seconds['first compaction']:.1f} s"
        )
