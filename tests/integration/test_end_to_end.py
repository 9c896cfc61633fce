"""The product end to end on the real stack: Kafka, Postgres, Spark and the four
services as separate processes. A producer streams upserts and deletes into three
partitions; nobody triggers anything by hand; the services keep the table
compacted, and the merged view equals the model throughout and at the end."""

from __future__ import annotations

import uuid
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

import firn
from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from tests.integration.cdc_workload import (
    DAYS,
    PROPERTIES,
    SCHEMA,
    CdcProducer,
    assert_committed_once,
    wait_until_settled,
)
from tests.integration.service_processes import SERVICE_PASSWORD, Services, running_services
from tests.waiting import messages_on

SERVICES = ["metrics", "planner", "dispatcher", "committer"]
DASHBOARD_TOKEN = "dashboard-token-" + uuid.uuid4().hex


def test_services_keep_a_streamed_table_compacted(
    stack_settings: FirnSettings, tmp_path: Path
) -> None:
    settings = stack_settings
    ensure_topics(settings, Topics.from_settings(settings).all())
    with (
        firn.connect(settings=settings) as catalog,
        running_services(
            settings,
            tmp_path,
            SERVICES,
            FIRN_METRICS_CHECK_INTERVAL="5",
            FIRN_DASHBOARD_TOKEN=DASHBOARD_TOKEN,
        ) as services,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        producer = CdcProducer(table, seed=5)
        reads = 0

        def between(n: int) -> None:
            nonlocal reads
            if n % 40 == 39:  # readers see the model while compactions run
                services.assert_running()
                producer.check()
                reads += 1

        producer.run(commits=210, per_second=8, between=between)
        settled = wait_until_settled(table, services, timeout=300)
        producer.check()
        conn = catalog.conn

        plans = conn.execute(
            "SELECT plan_id, partition_key, kind, state, reason->>'trigger' "
            "FROM compaction_plan WHERE table_id = %s ORDER BY plan_id",
            (table.table_id,),
        ).fetchall()
        committed = [p for p in plans if p[3] == "Committed"]
        assert {p[1] for p in committed} == {f"day={d}" for d in DAYS}, services.logs()
        # Every plan came from a trigger: a request, or gathered with one (the
        # table's other due partitions, compaction.gather-partitions).
        assert {p[4] for p in plans} <= {"metrics", "gathered"}
        assert "metrics" in {p[4] for p in plans}
        assert {p[3] for p in plans} <= {"Committed", "Replaced"}
        assert_committed_once(conn, table.table_id)
        tasks = conn.execute(
            "SELECT t.state, count(*) FROM compaction_task t JOIN compaction_plan p "
            "USING (plan_id) WHERE p.table_id = %s AND p.state = 'Committed' GROUP BY t.state",
            (table.table_id,),
        ).fetchall()
        assert [state for state, _ in tasks] == ["Committed"]
        # Unmerged change files per partition end below the trigger thresholds.
        assert settled == {"open": {}, "due": {}}
        for part in table.status()["partitions"]:
            assert part["unmerged_files"] < PROPERTIES["minor.file-count"] * 2 * 2, part
        print(
            f"\n{producer.commits} commits, {len(committed)} compactions "
            f"({len(plans) - len(committed)} plans replaced), {reads} mid-run reads"
        )
        assert_no_secret_shown(settings, services, table)


def assert_no_secret_shown(settings: FirnSettings, services: Services, table: firn.Table) -> None:
    """No password or token the run knew (the admin's, the services' logins', the
    dashboard's token) is in a service's log, on a topic (events and dead letters),
    or in the table's status."""
    admin_password = str(conninfo_to_dict(settings.database_dsn()).get("password") or "")
    known = [SERVICE_PASSWORD, DASHBOARD_TOKEN]
    # The local runner's admin password is random; testcontainers' default ("test") is
    # a word every test's topic names hold, and cannot be searched for.
    if len(admin_password) >= 16:
        known.append(admin_password)
    shown = {path.name: path.read_text(errors="replace") for path in services.log_dir.glob("*.log")}
    topics = Topics.from_settings(settings)
    for topic in topics.all():
        messages = messages_on(
            settings, topic, f"secrets-{uuid.uuid4().hex}", expect=None, timeout=5
        )
        shown[topic] = "\n".join(repr(m.value()) + repr(m.headers()) for m in messages)
    shown["status"] = repr(table.status())
    assert shown[topics.commits], "the check reads the events"
    for secret in known:
        leaks = [where for where, text in shown.items() if secret in text]
        assert not leaks, f"a secret is shown in {leaks}"
