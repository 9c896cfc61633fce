"""The catalog's figures as Prometheus metrics, read when Prometheus scrapes.

One reading (``firn.catalog.observed.read_catalog``) serves every scrape for
``prometheus_catalog_refresh`` seconds, so several scrapers cost one reading. A
reading that fails (Postgres down, restarting, or slower than
``prometheus_catalog_timeout``) never fails the scrape nor the service: the scrape
answers with ``firn_catalog_up 0`` and a bumped ``firn_catalog_reading_errors_total``
and no stale figures, and the next scrape after the refresh interval tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from firn.catalog.observed import CatalogReading, read_catalog
from firn.postgres.connection import Connection, ReconnectingConnection
from firn.postgres.retry import is_transient
from firn.settings import FirnSettings

log = logging.getLogger(__name__)

PARTITION = ["table", "partition"]


class CatalogCollector(Collector):
    """Yields the figures of the latest successful reading, or only the error ones."""

    def __init__(
        self,
        read: Callable[[], CatalogReading],
        *,
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._refresh = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()  # one reading at a time; the server has threads
        self._reading: CatalogReading | None = None
        self._read_at: float | None = None
        self._seconds = 0.0
        self.errors = 0

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self._lock:
            self._refresh_if_due()
            reading, seconds, errors = self._reading, self._seconds, self.errors
        up = GaugeMetricFamily(
            "firn_catalog_up", "1 when the last catalog reading succeeded, else 0."
        )
        up.add_metric([], 0 if reading is None else 1)
        yield up
        yield CounterMetricFamily(
            "firn_catalog_reading_errors",
            "Catalog readings that failed (Postgres away, or slower than the timeout).",
            value=errors,
        )
        if reading is not None:
            yield GaugeMetricFamily(
                "firn_catalog_reading_seconds",
                "How long the catalog reading behind these figures took.",
                value=seconds,
            )
            yield from families(reading)

    def _refresh_if_due(self) -> None:
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self._refresh:
            return
        self._read_at = now
        try:
            started = time.monotonic()
            self._reading = self._read()
            self._seconds = time.monotonic() - started
        except Exception as exc:  # a scrape must never take the service down
            self._reading = None
            self.errors += 1
            log.warning(
                "catalog reading for Prometheus failed (%s): %r",
                "transient" if is_transient(exc) else "permanent",
                exc,
            )


def families(reading: CatalogReading) -> Iterator[GaugeMetricFamily]:
    """The reading as metric families; pure."""
    gauges = {
        "unmerged_files": GaugeMetricFamily(
            "firn_partition_unmerged_files",
            "Live change files not yet merged into the base store.",
            labels=PARTITION,
        ),
        "unmerged_bytes": GaugeMetricFamily(
            "firn_partition_unmerged_bytes",
            "Bytes of the live change files not yet merged into the base store.",
            labels=PARTITION,
        ),
        "score": GaugeMetricFamily(
            "firn_partition_score",
            "The partition's compaction score (highest is planned first; 0: nothing to merge).",
            labels=PARTITION,
        ),
        "max_runs_per_node": GaugeMetricFamily(
            "firn_partition_read_amplification",
            "Sorted runs a read of the partition's busiest change node merges.",
            labels=PARTITION,
        ),
    }
    since = GaugeMetricFamily(
        "firn_partition_seconds_since_compaction",
        "Seconds since the partition's last committed compaction (absent: never compacted).",
        labels=PARTITION,
    )
    for p in reading.partitions:
        labels = [p.table, p.partition]
        for attribute, family in gauges.items():
            family.add_metric(labels, float(getattr(p, attribute)))
        if p.seconds_since_compaction is not None:
            since.add_metric(labels, p.seconds_since_compaction)
    yield from gauges.values()
    yield since
    tasks = GaugeMetricFamily(
        "firn_tasks",
        "Compaction tasks in the catalog, by table and state.",
        labels=["table", "state"],
    )
    for (table, state), n in sorted(reading.tasks.items()):
        tasks.add_metric([table, state], n)
    yield tasks
    stalled = GaugeMetricFamily(
        "firn_table_stalled_nodes",
        "Change nodes at the table's write.stall-runs limit: commits report stalled while above 0.",
        labels=["table"],
    )
    for table, n in sorted(reading.stalled_nodes.items()):
        stalled.add_metric([table], n)
    yield stalled


def catalog_collector(settings: FirnSettings) -> tuple[CatalogCollector, ReconnectingConnection]:
    """A collector reading through its own catalog connection (the HTTP server's
    thread must not share the service's), each reading bounded by
    ``prometheus_catalog_timeout``; close the connection when done."""
    timeout = settings.prometheus_catalog_timeout
    db = ReconnectingConnection(settings, connect_timeout=timeout)

    def read() -> CatalogReading:
        conn: Connection = db.conn
        with conn.transaction():
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true)", (f"{int(timeout * 1000)}",)
            )
            return read_catalog(conn)

    collector = CatalogCollector(read, refresh_seconds=settings.prometheus_catalog_refresh)
    return collector, db
