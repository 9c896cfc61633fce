"""The Prometheus endpoints against the real catalog: the metrics service's
``/metrics`` scraped over HTTP shows what the catalog holds; a catalog it cannot
reach is an error metric, not a failed scrape; the committer's figures of a
compaction come from its snapshots."""

from __future__ import annotations

import random
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

import firn
from firn.catalog.compactions import PlanCommit, compaction_event
from firn.catalog.metrics import partition_metrics
from firn.catalog.observed import compaction_latencies
from firn.catalog.progress import commit_points, latency_summary, merge_points
from firn.kafka import Topics, ensure_topics
from firn.kafka.clients import producer
from firn.model.states import PlanOutcome
from firn.observability.catalog_collector import catalog_collector
from firn.observability.endpoint import Endpoint
from firn.postgres.connection import ReconnectingConnection, connect
from firn.settings import FirnSettings
from firn_services.committer.handlers import Committer
from firn_services.runtime import serve_metrics
from tests.hash_tree import HASH_TREE
from tests.integration.service_processes import running_services
from tests.waiting import eventually

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("value", pa.string())])

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(endpoint: Endpoint) -> Samples:
    return _scrape_url(endpoint.url())


def _scrape_url(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _commit(table: firn.Table, rng: random.Random) -> firn.Committed:
    ids = [rng.randrange(1000) for _ in range(200)]
    return table.commit(
        pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "value": [f"v{rng.randrange(100)}" for _ in ids],
                "_op": ["U"] * 180 + ["D"] * 20,
            }
        )
    )


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


@pytest.fixture
def served(settings: FirnSettings) -> Iterator[tuple[FirnSettings, Endpoint]]:
    """The metrics service's endpoint as its main starts it, on a free port, with a
    registry of its own (the process-wide one holds every test's collectors)."""
    settings = settings.model_copy(
        update={
            "metrics_prometheus_port": _free_port(),
            "prometheus_host": "127.0.0.1",
            "prometheus_catalog_refresh": 0.001,  # every scrape reads the catalog
        }
    )
    collector, db = catalog_collector(settings)
    endpoint = serve_metrics(
        "metrics", settings, registry=CollectorRegistry(), collectors=[collector]
    )
    assert endpoint is not None
    yield settings, endpoint
    endpoint.close()
    db.close()


def test_the_metrics_endpoint_shows_the_catalog(
    catalog: firn.Catalog, served: tuple[FirnSettings, Endpoint]
) -> None:
    _, endpoint = served
    table = catalog.create_table(
        "prom.orders",
        SCHEMA,
        ["id"],
        properties={"change.buckets": 4, "base.buckets": 2, "write.stall-runs": 3, **HASH_TREE},
    )
    rng = random.Random(16)
    results = [_commit(table, rng) for _ in range(3)]
    assert results[-1].stalled
    assert not results[0].stalled

    samples = _scrape(endpoint)
    part = (("partition", ""), ("table", "prom.orders"))
    truth = partition_metrics(catalog.conn, table.table_id, table.properties)[""]
    status = table.status()["partitions"][0]
    assert samples[("firn_catalog_up", ())] == 1
    assert samples[("firn_partition_unmerged_files", part)] == truth.unmerged_files > 0
    assert samples[("firn_partition_unmerged_bytes", part)] == truth.unmerged_bytes > 0
    assert samples[("firn_partition_score", part)] == pytest.approx(status["score"])
    assert samples[("firn_partition_read_amplification", part)] == 3
    assert ("firn_partition_seconds_since_compaction", part) not in samples  # never compacted
    # Every change node holds 3 runs: write.stall-runs.
    assert samples[("firn_table_stalled_nodes", (("table", "prom.orders"),))] == 4

    firn.compact(table, engine="local")
    samples = _scrape(endpoint)
    assert samples[("firn_partition_unmerged_files", part)] == 0
    assert samples[("firn_partition_read_amplification", part)] == 0
    assert samples[("firn_table_stalled_nodes", (("table", "prom.orders"),))] == 0
    assert 0 <= samples[("firn_partition_seconds_since_compaction", part)] < 600
    tasks = {
        dict(labels)["state"]: value
        for (name, labels), value in samples.items()
        if name == "firn_tasks" and dict(labels)["table"] == "prom.orders"
    }
    counted = catalog.conn.execute(
        "SELECT t.state, count(*) FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %s GROUP BY t.state",
        (table.table_id,),
    ).fetchall()
    assert tasks == {state: n for state, n in counted}
    assert tasks["Committed"] > 0


def test_a_catalog_it_cannot_reach_is_an_error_metric_and_the_endpoint_keeps_serving(
    settings: FirnSettings,
) -> None:
    nowhere = f"postgresql://firn@127.0.0.1:{_free_port()}/firn"
    settings = settings.model_copy(
        update={
            "database_url": SecretStr(nowhere),
            "metrics_prometheus_port": _free_port(),
            "prometheus_host": "127.0.0.1",
            "prometheus_catalog_refresh": 0.001,
            "prometheus_catalog_timeout": 2.0,
        }
    )
    collector, db = catalog_collector(settings)
    endpoint = serve_metrics(
        "metrics", settings, registry=CollectorRegistry(), collectors=[collector]
    )
    assert endpoint is not None
    try:
        for errors in (1, 2):
            samples = _scrape(endpoint)
            assert samples[("firn_catalog_up", ())] == 0
            assert samples[("firn_catalog_reading_errors_total", ())] == errors
            assert not any(name.startswith("firn_partition_") for name, _ in samples)
    finally:
        endpoint.close()
        db.close()


def test_the_committer_counts_a_plan_and_the_wait_of_each_commit_it_merged(
    catalog: firn.Catalog, settings: FirnSettings
) -> None:
    table = catalog.create_table("prom.latency", SCHEMA, ["id"], properties={"change.buckets": 2})
    rng = random.Random(7)
    for _ in range(3):
        _commit(table, rng)
    plan = firn.compact(table, engine="local")["plans"][0]
    assert plan["outcome"] == "committed"

    waits = compaction_latencies(catalog.conn, plan["plan_id"])
    summary = latency_summary(
        commit_points(catalog.conn, table.table_id), merge_points(catalog.conn, table.table_id)
    )
    assert len(waits) == summary.compacted == 3
    assert max(waits) == pytest.approx(summary.max)

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"table": "prom.latency", **labels}) or 0.0

    before = value("firn_commit_to_compacted_seconds_count")
    committed = value("firn_plans_committed_total", kind="major")
    db = ReconnectingConnection(settings)
    try:
        committer = Committer(db, producer(settings), Topics.from_settings(settings).compactions)
        # A plan that left its partition's merged seq where it was (a merge of runs)
        # compacted no commit: counted, with no wait observed.
        committer._observe(PlanCommit(plan["plan_id"], PlanOutcome.COMMITTED, added_bytes=1))
        assert value("firn_commit_to_compacted_seconds_count") == before
        committer._observe(
            PlanCommit(
                plan["plan_id"],
                PlanOutcome.COMMITTED,
                added_bytes=1234,
                merged_seq_advanced=True,
            )
        )
        assert value("firn_commit_to_compacted_seconds_count") == before + 3
        # As the committer's own commit reports it: with its event, nothing read back.
        committer._observe(
            PlanCommit(
                plan["plan_id"],
                PlanOutcome.COMMITTED,
                merged_seq_advanced=True,
                from_merged_seq=0,
                event=compaction_event(catalog.conn, plan["plan_id"]),
            )
        )
    finally:
        db.close()
    assert value("firn_commit_to_compacted_seconds_count") == before + 6
    assert value("firn_plans_committed_total", kind="major") == committed + 3
    assert value("firn_rewritten_bytes_total") >= 1234


def test_running_services_serve_their_metrics(stack_settings: FirnSettings, tmp_path: Path) -> None:
    """The planner (a consume-loop service) and the metrics service (Faust) as real
    processes, each on its own port: the consumer lag of each, the catalog figures
    and the committed bytes of the metrics service."""
    settings = stack_settings
    ports = {"planner": _free_port(), "metrics": _free_port()}
    env = {f"FIRN_{name.upper()}_PROMETHEUS_PORT": str(port) for name, port in ports.items()}
    env["FIRN_PROMETHEUS_HOST"] = "127.0.0.1"
    env["FIRN_PROMETHEUS_CATALOG_REFRESH"] = "0.1"  # each scrape (a second apart) reads
    ensure_topics(settings, Topics.from_settings(settings).all())
    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, ["planner", "metrics"], **env) as services,
    ):
        table = catalog.create_table("prom.live", SCHEMA, ["id"])
        rng = random.Random(3)

        def scrape(name: str) -> Samples:
            services.assert_running()
            try:
                return _scrape_url(f"http://127.0.0.1:{ports[name]}/metrics")
            except OSError:  # not listening yet
                return {}

        def lag_of(samples: Samples, service: str) -> list[float]:
            return [
                value
                for (name, labels), value in samples.items()
                if name == "firn_kafka_consumer_lag" and dict(labels)["service"] == service
            ]

        part = (("partition", ""), ("table", "prom.live"))

        def commit_and_scrape() -> tuple[Samples, Samples] | None:
            _commit(table, rng)
            planner, metrics = scrape("planner"), scrape("metrics")
            committed = metrics.get(("firn_committed_bytes_total", (("table", "prom.live"),)), 0)
            if lag_of(planner, "planner") and lag_of(metrics, "metrics") and committed > 0:
                return planner, metrics
            return None

        scraped = eventually(
            commit_and_scrape,
            timeout=120,
            every=1.0,
            what="consumer lag of planner and metrics, and the committed bytes",
            describe=services.logs,
        )
        assert scraped is not None
        planner, metrics = scraped
        assert all(lag >= 0 for lag in lag_of(planner, "planner") + lag_of(metrics, "metrics"))
        assert metrics[("firn_catalog_up", ())] == 1
        truth = partition_metrics(catalog.conn, table.table_id, table.properties)[""]
        # Commits have stopped and no dispatcher runs: once the reading of the last
        # scrape ages past the refresh interval, a scrape shows the catalog as it stands.
        eventually(
            lambda: (
                scrape("metrics")[("firn_partition_unmerged_files", part)] == truth.unmerged_files
            ),
            timeout=10,
            what=f"the scrape showing the catalog's {truth.unmerged_files} unmerged files",
        )
        assert ("firn_partition_unmerged_files", part) not in planner  # the metrics service's only


def test_a_catalog_slower_than_the_timeout_is_an_error_metric_until_it_answers(
    catalog: firn.Catalog, settings: FirnSettings
) -> None:
    """A reading stuck behind a lock is cut off by the statement timeout: the scrape
    answers with the error, and the next one after the lock is gone has the figures."""
    catalog.create_table("prom.locked", SCHEMA, ["id"])
    settings = settings.model_copy(
        update={
            "metrics_prometheus_port": _free_port(),
            "prometheus_host": "127.0.0.1",
            "prometheus_catalog_refresh": 0.001,
            "prometheus_catalog_timeout": 1.0,
        }
    )
    collector, db = catalog_collector(settings)
    endpoint = serve_metrics(
        "metrics", settings, registry=CollectorRegistry(), collectors=[collector]
    )
    assert endpoint is not None
    locker = connect(settings)
    try:
        with locker.transaction():
            locker.execute("LOCK TABLE catalog_table IN ACCESS EXCLUSIVE MODE")
            samples = _scrape(endpoint)
            assert samples[("firn_catalog_up", ())] == 0
            assert samples[("firn_catalog_reading_errors_total", ())] == 1
        samples = _scrape(endpoint)
        assert samples[("firn_catalog_up", ())] == 1
        assert samples[("firn_catalog_reading_errors_total", ())] == 1
        assert samples[("firn_table_stalled_nodes", (("table", "prom.locked"),))] == 0
    finally:
        locker.close()
        endpoint.close()
        db.close()


@pytest.mark.usefixtures("prometheus_sensors")
def test_a_broken_catalog_connection_counts_a_reconnect(settings: FirnSettings) -> None:
    db = ReconnectingConnection(settings)
    try:
        db.conn.close()
        before = REGISTRY.get_sample_value("firn_postgres_reconnects_total") or 0.0
        assert db.conn.execute("SELECT 1").fetchone() == (1,)
        assert REGISTRY.get_sample_value("firn_postgres_reconnects_total") == before + 1
    finally:
        db.close()
