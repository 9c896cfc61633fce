"""The Prometheus metrics without a server: the catalog collector's figures, its
caching and its errors, consumer lag, the port settings and what `firn up` prints."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from confluent_kafka import TopicPartition
from prometheus_client import REGISTRY, CollectorRegistry

from firn.catalog.observed import CatalogReading, PartitionFigures
from firn.errors import ConfigError, ServiceError, error_kind
from firn.events.wire import UnhandledEventError
from firn.kafka.lag import consumer_lag, lag_of, report_lag
from firn.kafka.loop import ConsumeLoop
from firn.observability.catalog_collector import CatalogCollector
from firn.postgres.retry import is_transient
from firn.settings import FirnSettings
from firn_localstack.commands import _describe_up, metrics_urls

READING = CatalogReading(
    partitions=[
        PartitionFigures("orders", "region=eu", 7, 7000, 2.5, 4, 30.0),
        PartitionFigures("orders", "region=us", 0, 0, 0.0, 0, None),
    ],
    tasks={("orders", "Pending"): 3, ("orders", "Committed"): 10},
    stalled_nodes={"orders": 2},
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """A catalog reading function that fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.failing = False

    def __call__(self) -> CatalogReading:
        self.calls += 1
        if self.failing:
            raise ServiceError("cannot connect to Postgres: connection refused")
        return READING


def _registry(collector: CatalogCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


def test_the_collector_reports_each_partition_table_and_task_state() -> None:
    registry = _registry(CatalogCollector(Reads(), refresh_seconds=10))
    eu = {"table": "orders", "partition": "region=eu"}
    us = {"table": "orders", "partition": "region=us"}
    value = registry.get_sample_value
    assert value("firn_catalog_up") == 1
    assert value("firn_partition_unmerged_files", eu) == 7
    assert value("firn_partition_unmerged_bytes", eu) == 7000
    assert value("firn_partition_score", eu) == 2.5
    assert value("firn_partition_read_amplification", eu) == 4
    assert value("firn_partition_seconds_since_compaction", eu) == 30.0
    assert value("firn_partition_unmerged_files", us) == 0
    # Never compacted: no age at all rather than a made-up one.
    assert value("firn_partition_seconds_since_compaction", us) is None
    assert value("firn_tasks", {"table": "orders", "state": "Pending"}) == 3
    assert value("firn_tasks", {"table": "orders", "state": "Committed"}) == 10
    assert value("firn_table_stalled_nodes", {"table": "orders"}) == 2
    assert value("firn_catalog_reading_errors_total") == 0


def test_one_reading_serves_every_scrape_until_the_refresh_interval_passes() -> None:
    reads, clock = Reads(), Clock()
    registry = _registry(CatalogCollector(reads, refresh_seconds=10, clock=clock))
    registry.get_sample_value("firn_catalog_up")
    clock.now = 9.0
    registry.get_sample_value("firn_catalog_up")
    assert reads.calls == 1
    clock.now = 10.0
    registry.get_sample_value("firn_catalog_up")
    assert reads.calls == 2


def test_a_failed_reading_is_an_error_metric_not_a_failed_scrape_nor_stale_figures() -> None:
    reads, clock = Reads(), Clock()
    collector = CatalogCollector(reads, refresh_seconds=10, clock=clock)
    registry = _registry(collector)
    assert registry.get_sample_value("firn_catalog_up") == 1
    reads.failing = True
    clock.now = 10.0
    assert registry.get_sample_value("firn_catalog_up") == 0
    assert registry.get_sample_value("firn_catalog_reading_errors_total") == 1
    assert (
        registry.get_sample_value(
            "firn_partition_unmerged_files", {"table": "orders", "partition": "region=eu"}
        )
        is None
    )
    clock.now = 20.0
    registry.get_sample_value("firn_catalog_up")
    assert collector.errors == 2
    reads.failing = False
    clock.now = 30.0
    assert registry.get_sample_value("firn_catalog_up") == 1
    assert registry.get_sample_value("firn_catalog_reading_errors_total") == 2


def test_lag_counts_from_the_first_known_position() -> None:
    assert lag_of(100, 40) == 60
    assert lag_of(100, -1001, 90) == 10  # nothing read yet: from the committed offset
    assert lag_of(100, -1001, -1001, 0) == 100  # nothing committed: from the start
    assert lag_of(100, 120) == 0  # read past a watermark fetched earlier
    assert lag_of(-1, 40) is None  # the broker did not say


class FakeConsumer:
    def __init__(self) -> None:
        self.assigned = [TopicPartition("firn.plan-tasks", 0), TopicPartition("firn.plan-tasks", 1)]

    def assignment(self) -> list[TopicPartition]:
        return self.assigned

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        offsets = {0: 40, 1: -1001}
        return [TopicPartition(p.topic, p.partition, offsets[p.partition]) for p in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, 5) for p in partitions]

    def get_watermark_offsets(self, tp: TopicPartition, **options: Any) -> tuple[int, int]:
        # The loop's lag must not wait for the broker: only cached watermarks.
        assert options == {"cached": True}
        return (0, {0: 50, 1: 8}[tp.partition])


def test_consumer_lag_reads_positions_then_committed_offsets() -> None:
    lag = consumer_lag(FakeConsumer())  # type: ignore[arg-type]
    assert lag == {("firn.plan-tasks", 0): 10, ("firn.plan-tasks", 1): 3}


@pytest.mark.usefixtures("prometheus_sensors")
def test_reported_lag_drops_partitions_no_longer_assigned() -> None:
    report_lag("lag-test", {("t", 0): 5, ("t", 1): 6}, set())
    report_lag("lag-test", {("t", 1): 2}, {("t", 0), ("t", 1)})
    labels = {"service": "lag-test", "topic": "t"}
    lag = "firn_kafka_consumer_lag"
    assert REGISTRY.get_sample_value(lag, {**labels, "partition": "0"}) is None
    assert REGISTRY.get_sample_value(lag, {**labels, "partition": "1"}) == 2


def test_dead_letter_reasons_are_error_kinds_not_free_text() -> None:
    assert error_kind(UnhandledEventError("not JSON: Expecting value")) == "UnhandledEventError"
    assert error_kind(ConfigError("bad event")) == "ConfigError"
    assert error_kind(KeyError("x")) == "unexpected"


def test_each_service_has_its_own_port_setting() -> None:
    settings = FirnSettings(committer_prometheus_port=0, planner_prometheus_port=19462)
    assert settings.prometheus_port("metrics") == 9461
    assert settings.prometheus_port("planner") == 19462
    assert settings.prometheus_port("dispatcher") == 9463
    assert settings.prometheus_port("committer") == 0
    assert settings.prometheus_port("publisher") == 9465
    with pytest.raises(ConfigError):
        settings.prometheus_port("scheduler")


def test_firn_up_prints_each_metrics_url() -> None:
    settings = FirnSettings(committer_prometheus_port=0)
    urls = metrics_urls(settings)
    assert urls == {
        "metrics": "http://127.0.0.1:9461/metrics",
        "planner": "http://127.0.0.1:9462/metrics",
        "dispatcher": "http://127.0.0.1:9463/metrics",
        "publisher": "http://127.0.0.1:9465/metrics",
    }
    assert metrics_urls(FirnSettings(prometheus_host="10.1.2.3"))["planner"] == (
        "http://10.1.2.3:9462/metrics"
    )
    text = _describe_up(
        {
            "home": "/tmp/h",
            "seconds": {"total": 1.0},
            "database_url": "postgresql://x",
            "kafka_bootstrap": "localhost:1",
            "kafka_version": "4",
            "services": {"planner": 11, "committer": 12},
            "metrics": urls,
        }
    )
    assert "planner    pid 11, connected, metrics http://127.0.0.1:9462/metrics" in text
    assert "committer  pid 12, connected\n" in text


@pytest.mark.usefixtures("prometheus_sensors")
def test_a_postgres_error_is_counted_where_it_is_judged() -> None:
    def count(error: str) -> float:
        return REGISTRY.get_sample_value("firn_postgres_errors_total", {"error": error}) or 0.0

    before = count("OperationalError"), count("UniqueViolation")
    assert is_transient(psycopg.OperationalError("server closed the connection"))
    assert not is_transient(psycopg.errors.UniqueViolation("duplicate key"))
    assert not is_transient(ConfigError("not a database error"))
    assert (count("OperationalError"), count("UniqueViolation")) == (before[0] + 1, before[1] + 1)


class _Message:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def topic(self) -> str:
        return "firn.plan-tasks"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self._value


class _AckingProducer:
    def produce(self, *_: object, **__: object) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        return 0


class _Committing:
    def store_offsets(self, **_: object) -> None:
        pass


@pytest.mark.usefixtures("prometheus_sensors")
def test_each_dead_letter_is_counted_by_service_and_reason_kind() -> None:
    def boom(_event: Any) -> None:
        raise KeyError("a bug")

    loop = ConsumeLoop(
        lambda **_: _Committing(),
        _AckingProducer(),  # type: ignore[arg-type]
        topics=["firn.plan-tasks"],
        handlers={"plan-task": boom},
        read=dict,  # the handler itself fails, on an event it never reads
        dlq_topic="firn.dlq",
        service="deadletter-test",
    )

    def count(reason: str) -> float:
        labels = {"service": "deadletter-test", "reason": reason}
        return REGISTRY.get_sample_value("firn_dead_letters_total", labels) or 0.0

    try:
        loop._handle(_Message(b"not json"))  # type: ignore[arg-type]
        loop._handle(_Message(b'{"event_type": "nobody-handles-this"}'))  # type: ignore[arg-type]
        loop._handle(_Message(b'{"event_type": "plan-task"}'))  # type: ignore[arg-type]
    finally:
        loop._worker.shutdown()
    assert count("UnhandledEventError") == 2
    assert count("unexpected") == 1
