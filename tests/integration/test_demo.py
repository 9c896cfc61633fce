"""The demo producer of ``firn up --demo`` against the real catalog and Kafka: the
table equals the producer's model after commits and a compaction, and the summary's
latency and counters come out of the catalog's history."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

import firn
from firn.catalog.progress import commit_points
from firn.catalog.publication import newest_change
from firn.iceberg.publisher import Publisher
from firn.settings import FirnSettings
from firn_localstack.demo import DEMO_PROPERTIES, DemoOptions, DemoProducer, Progress
from firn_localstack.demo_run import summary_data, summary_text
from firn_localstack.publication import check_publication
from firn_localstack.workload import DAYS

OPTIONS = DemoOptions(rate=20.0, keys=300, batch=40, delete_ratio=0.2, idle_seconds=0, seed=11)


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def test_the_table_equals_the_model_and_latency_is_measured(catalog: firn.Catalog) -> None:
    producer = DemoProducer(catalog, OPTIONS)
    assert producer.table.properties.base_buckets == DEMO_PROPERTIES["base.buckets"]
    shown: list[Progress] = []
    producer.run(threading.Event(), duration=2.0, show=shown.append)
    compacted_commits = producer.commits
    assert compacted_commits > 0
    compaction = firn.compact(producer.table, engine="local")
    committed = [p for p in compaction["plans"] if p["outcome"] == "committed"]
    assert committed
    producer.run(threading.Event(), duration=1.0, show=shown.append)
    result = producer.finish()

    assert result.ok, result
    assert result.commits > compacted_commits
    assert result.rows == result.commits * OPTIONS.batch
    assert sum(result.applied.values()) == result.rows
    assert result.check.actual_rows == result.check.expected_rows > 0
    assert result.reading.compactions == {"major": len(committed)}
    assert result.reading.unmerged_files > 0  # the commits after the compaction
    assert result.reading.last_compaction_wait is not None
    assert result.reading.last_compaction_wait >= 0

    latency = result.latency
    pairs = commit_points(catalog.conn, producer.table.table_id, producer.start_seq)
    assert latency.compacted + latency.waiting == len(pairs)
    assert latency.compacted > 0
    assert latency.waiting > 0
    assert latency.median is not None
    assert latency.p95 is not None
    assert latency.max is not None
    assert 0 <= latency.median <= latency.p95 <= latency.max

    # Bytes written: every change file committed, and the compaction's outputs.
    files = producer.table.files()
    live_change = sum(
        size
        for store, size in zip(
            files.column("store").to_pylist(), files.column("size").to_pylist(), strict=True
        )
        if store == "change"
    )
    assert result.written.committed > live_change > 0  # merged ones count too
    assert result.written.compacted > 0
    assert result.written.amplification is not None
    assert result.written.amplification > 1

    # The compaction's tasks, from their transition history.
    assert result.work.tasks == sum(p["tasks"] for p in committed)
    assert result.work.input_bytes > 0
    assert 0 < result.work.busy_seconds <= result.work.task_seconds

    assert shown
    assert shown[-1].reading.seq >= shown[0].reading.seq > 0
    assert shown[0].reading.shape.base_bytes == 0 < shown[-1].reading.shape.base_bytes
    assert shown[-1].reading.shape.unmerged_bytes > 0
    data = summary_data(result, OPTIONS.table, None, None)
    assert data["ok"] is True
    assert data["latency"]["compacted"] == latency.compacted
    assert "read() equals the reference model" in summary_text(data)


@pytest.mark.parametrize("distribution", ["ordered", "skewed"])
def test_every_key_distribution_keeps_the_table_equal_to_the_model(
    catalog: firn.Catalog, distribution: str
) -> None:
    producer = DemoProducer(catalog, replace(OPTIONS, distribution=distribution))  # type: ignore[arg-type]
    shown: list[Progress] = []
    producer.run(threading.Event(), duration=1.5, show=shown.append)
    firn.compact(producer.table, engine="local")
    producer.run(threading.Event(), duration=0.5, show=shown.append)
    result = producer.finish()
    assert result.ok, result
    assert result.applied["update"] > 0
    assert result.work.tasks > 0
    progress = shown[-1].as_dict()
    assert progress["base_rows"] > 0
    assert progress["runs_per_node"]["mean"] >= 1


def test_the_published_iceberg_table_is_compared_with_the_table(
    catalog: firn.Catalog, settings: FirnSettings
) -> None:
    producer = DemoProducer(catalog, OPTIONS)
    producer.run(threading.Event(), duration=1.0, show=lambda _: None)
    firn.compact(producer.table, engine="local")
    publisher = Publisher(catalog.conn, catalog=settings.iceberg_catalog)
    assert publisher.publish(OPTIONS.table).outcome == "published"
    # Commits after the compaction are not published (nor waited for): the published
    # table is compared with the table as folded at the snapshot it shows.
    producer.run(threading.Event(), duration=0.5, show=lambda _: None)
    check = check_publication(
        settings, catalog, producer.table, producer.start_snapshot, window=60.0, timeout=5.0
    )
    assert check.error is None, check
    assert check.matches is True
    assert check.firn_snapshot == newest_change(catalog.conn, producer.table.table_id)
    assert check.check is not None
    assert check.check.actual_rows > 0
    assert check.publications == 1
    assert check.lag_max is not None
    assert check.lag_max >= 0
    assert check.lag_p50 == check.lag_p95 == check.lag_max  # one publication
    result = replace(producer.finish(), publication=check)
    assert result.ok, result
    text = summary_text(summary_data(result, OPTIONS.table, None, None))
    assert "published    1 Iceberg snapshot, lag median" in text
    assert "published table equals the table" in text

    # A compaction the publisher has not seen: the check waits, then says so.
    firn.compact(producer.table, engine="local")
    late = check_publication(
        settings, catalog, producer.table, producer.start_snapshot, window=60.0, timeout=1.0
    )
    assert late.matches is None
    assert late.error is not None
    assert "did not show the newest compaction" in late.error
    assert late.firn_snapshot == check.firn_snapshot
    assert late.publications == 1


def test_a_kept_demo_table_is_checked_from_its_current_contents(catalog: firn.Catalog) -> None:
    first = DemoProducer(catalog, OPTIONS)
    first.commit_batch()
    first.commit_batch()
    firn.compact(first.table, engine="local")
    again = DemoProducer(catalog, OPTIONS)
    assert again.model.rows == first.model.rows
    again.commit_batch()
    result = again.finish()
    assert result.ok, result
    assert result.commits == 1
    # Only this run counts: its one commit, once per partition it wrote, and none of
    # the compactions before it.
    assert result.reading.compactions == {}
    assert result.latency.compacted == 0
    assert 1 <= result.latency.waiting <= len(DAYS)


def test_a_table_of_another_shape_is_not_taken_over(catalog: firn.Catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    catalog.create_table("demo.other", schema, ["id"])
    with pytest.raises(firn.ConfigError, match="exists with another schema"):
        DemoProducer(catalog, DemoOptions(table="demo.other"))
