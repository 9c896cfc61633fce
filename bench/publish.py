"""Publishing a Firn table as an Apache Iceberg table (``firn.iceberg``): what it
writes, how far it trails compaction, and how fast other engines read the result.

Measured 2026-11-27 (2-core development machine, throwaway local Postgres, firn at
f61e211; the same run gives the floors):

    .venv/bin/python bench/publish.py --json    # 2M rows loaded, 20k rows/s x 60 s
      ingest 1.2M rows in 120 commits (19,998 rows/s, 0 stalled), 14 compactions,
        12 publications
      written: 14.54 MiB published / 38.57 MiB committed = 0.38x (goal 0.1x: NOT met)
      [at cc1ad93, incremental delete files: 3.59 / 38.57 MiB = 0.093x, met];
        12.35 MiB of it position delete files (2,052 files, 3.64M rows: a changed
        vector is republished whole); compaction wrote 40.11 MiB
      lag p50 0.76 s, p95 1.22 s, max 2.00 s (goal p95 < 10 s: met; in-process)
      reads of 1.99M rows (266 base files, 2.35M rows before deletes, same rows as
        read()): pyiceberg 1.36 s = 4.16x pyarrow's plain 0.33 s; DuckDB iceberg_scan
        0.51 s = 1.12x its read_parquet 0.46 s (1.57x pyarrow); Firn read() 1.29x
    .venv/bin/python bench/publish.py --quick   # 200k rows, 5k rows/s x 12 s
      2.27 MiB / 3.99 MiB = 0.57x (1.44 MiB deletes: 672 files, 188k rows); lag p50
      0.33 s, p95 0.44 s; pyiceberg 4.8x, DuckDB 1.74x its read_parquet

A keyed table in ``--partitions`` partitions (``base.buckets`` 4,
``deletion-vectors.min-file-bytes`` 1, so folds keep base files with deletion vectors,
published as position delete files) is loaded with ``--rows`` rows, then a producer
thread commits upserts and deletes (10 %) at ``--rate`` rows/s for ``--duration`` s
while the main thread compacts (``firn.compact(kind="major", engine="local")``) and
publishes (``Publisher(conn).publish``) in a loop, every ``--interval`` s at most.

1. **Bytes written per byte committed.** The sum of ``Publication.bytes_written``
   (manifests, manifest lists, metadata files, position delete files; base files are
   referenced in place) against the bytes of the change files the producer committed
   (``data_file.size_bytes`` of ``store = 'change'`` rows added by ``commit``
   snapshots). Goal: 0.1x. The position delete files and rows written are counted
   from each new snapshot's delete manifests.
2. **Publication lag.** ``Publication.lag_seconds``: from the compaction's commit in
   the Firn catalog to the moved Iceberg pointer, p50/p95. Goal: p95 < 10 s. The
   publisher runs in-process right after each compaction, so this is the publisher's
   own share; the service adds its wake-up (a compaction event, or its sweep).
3. **Reads.** Once compaction has caught up, the published table read by DuckDB
   (``iceberg_scan``) and pyiceberg (``load_table(...).scan().to_arrow()``) must equal
   ``Table.read()``; then each is timed (best of ``--runs``) against the floor: the
   same live base files read as plain Parquet (``pyarrow.dataset`` and DuckDB
   ``read_parquet``; deletes not applied).

    .venv/bin/python bench/publish.py           # ~2 min; FIRN_DATABASE_URL or a throwaway Postgres
    .venv/bin/python bench/publish.py --quick   # ~20 s
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from harness import bench_catalog, best_of  # bench/ is on sys.path when run as a script
from pyiceberg.catalog import load_catalog
from pyiceberg.io import load_file_io
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.serializers import FromInputFile

import firn
from firn.iceberg.properties import catalog_properties
from firn.iceberg.publisher import Publication, Publisher
from firn.postgres.connection import connect
from firn.settings import FirnSettings

KiB = 1 << 10
MiB = 1 << 20
NAME = "bench.published"
SCHEMA = pa.schema(
    [
        pa.field("part", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("label", pa.string()),
        pa.field("price", pa.float64()),
    ]
)
KEY = ["part", "id"]
PROPERTIES = {
    "base.buckets": 4,
    "change.buckets": 4,
    "deletion-vectors.min-file-bytes": 1,
}
GOAL_RATIO = 0.1
GOAL_P95_S = 10.0


def rows(rng: np.random.Generator, ids: np.ndarray, partitions: int) -> pa.Table:
    n = len(ids)
    parts = np.array([f"p{i}" for i in range(partitions)])
    return pa.table(
        {
            "part": pa.array(parts[ids % partitions]),
            "id": pa.array(ids, pa.int64()),
            "qty": pa.array(rng.integers(0, 10_000, n), pa.int64()),
            "label": pa.array([f"label-{v:06d}" for v in rng.integers(0, 10**6, n)]),
            "price": pa.array(rng.random(n)),
        },
        schema=SCHEMA,
    )


def change_set(rng: np.random.Generator, keys: int, batch: int, partitions: int) -> pa.Table:
    """``batch`` distinct keys of ``keys`` (10 % beyond the loaded ones: inserts), 10 %
    of them deleted."""
    ids = rng.choice(keys, batch, replace=False)
    ops = np.where(rng.random(batch) < 0.1, "D", "U")
    return rows(rng, ids, partitions).append_column("_op", pa.array(ops))


class Producer(threading.Thread):
    """Commits ``rate`` rows/s in ticks of ``tick`` s through a catalog of its own."""

    def __init__(self, settings: FirnSettings, args: argparse.Namespace) -> None:
        super().__init__(daemon=True)
        self.settings, self.args = settings, args
        self.rows = self.commits = self.stalled = 0
        self.seconds = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        args = self.args
        rng = np.random.default_rng(args.seed + 1)
        keys = int(args.rows * 1.1)
        batch = max(1, round(args.rate * args.tick))
        try:
            with firn.connect(settings=self.settings) as catalog:
                table = catalog.table(NAME)
                began = time.monotonic()
                due = began
                while due - began < args.duration:
                    committed = table.commit(change_set(rng, keys, batch, args.partitions))
                    self.rows += batch
                    self.commits += 1
                    self.stalled += committed.stalled
                    due += args.tick
                    time.sleep(max(0.0, due - time.monotonic()))
                self.seconds = time.monotonic() - began
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def deletes_added(publication: Publication) -> tuple[int, int, int]:
    """Position delete files, rows and bytes the publication's snapshot added."""
    location = publication.metadata_location
    assert location is not None
    io = load_file_io({}, location)
    metadata = FromInputFile.table_metadata(io.new_input(location))
    snapshot = metadata.current_snapshot()
    assert snapshot is not None
    assert snapshot.snapshot_id == publication.iceberg_snapshot
    files = rows_ = size = 0
    for manifest in snapshot.manifests(io):
        if (
            manifest.content == ManifestContent.DELETES
            and manifest.added_snapshot_id == snapshot.snapshot_id
        ):
            files += manifest.added_files_count or 0
            rows_ += manifest.added_rows_count or 0
            size += sum(
                e.data_file.file_size_in_bytes
                for e in manifest.fetch_manifest_entry(io, discard_deleted=True)
                if e.status == ManifestEntryStatus.ADDED
            )
    return files, rows_, size


def committed_bytes(catalog: firn.Catalog, table: firn.Table, after: int) -> tuple[int, int]:
    """Bytes and files of change files committed by ``commit`` snapshots after ``after``."""
    row = catalog.conn.execute(
        "SELECT coalesce(sum(d.size_bytes), 0), count(*) FROM data_file d JOIN snapshot s "
        "ON s.table_id = d.table_id AND s.snapshot_id = d.added_snapshot "
        "WHERE d.table_id = %s AND d.store = 'change' AND s.kind = 'commit' "
        "AND d.added_snapshot > %s",
        (table.table_id, after),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def compacted_bytes(summary: dict[str, Any]) -> int:
    return sum(p["added_bytes"] for p in summary["plans"] if p["outcome"] == "committed")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@cache
def _extension(package: str) -> str:
    module = __import__(package)
    found = sorted(Path(module.__file__).parent.rglob("*.duckdb_extension"))
    assert found, f"{package} holds no .duckdb_extension file"
    return str(found[0])


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """DuckDB with its iceberg extension from the ``duckdb-extension-*`` wheels (as
    tests/integration/iceberg_readers.py: DuckDB cannot download extensions here)."""
    conn = duckdb.connect()
    conn.execute("SET autoinstall_known_extensions = false")
    conn.execute("SET autoload_known_extensions = false")
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        conn.execute(f"LOAD '{_extension(package)}'")
    return conn


def canonical(rows: pa.Table) -> pa.Table:
    """The table's columns in the schema's types, sorted by key (for comparison)."""
    out = pa.table({f.name: rows.column(f.name).cast(f.type) for f in SCHEMA})
    return out.sort_by([(k, "ascending") for k in KEY])


def ingest_run(catalog: firn.Catalog, args: argparse.Namespace) -> tuple[firn.Table, dict]:
    rng = np.random.default_rng(args.seed)
    table = catalog.create_table(NAME, SCHEMA, KEY, ["part"], PROPERTIES)
    table.load(rows(rng, np.arange(args.rows), args.partitions))
    conn = connect(catalog.settings, autocommit=True)
    publisher = Publisher(conn)
    first = publisher.publish(NAME)
    assert first.outcome == "published", first
    setup_snapshot = table.current_snapshot()
    producer = Producer(catalog.settings, args)
    producer.start()
    pubs: list[tuple[Publication, float]] = []
    compaction_bytes = compaction_s = 0.0
    rounds = 0
    deletes = [0, 0, 0]
    while True:
        last = not producer.is_alive()
        began = time.monotonic()
        compaction_bytes += compacted_bytes(firn.compact(table, kind="major", engine="local"))
        compacted = time.monotonic()
        publication = publisher.publish(NAME)
        published = time.monotonic()
        rounds += 1
        compaction_s += compacted - began
        if publication.outcome == "published":
            pubs.append((publication, published - compacted))
            for i, n in enumerate(deletes_added(publication)):
                deletes[i] += n
        else:
            assert publication.outcome == "unchanged", publication
        print(
            f"  round {rounds}: compaction {compacted - began:.2f} s, publication "
            f"{publication.outcome} {published - compacted:.2f} s, "
            f"{publication.bytes_written / KiB:.0f} KiB, lag {publication.lag_seconds}",
            file=sys.stderr,
        )
        if last:
            break
        time.sleep(max(0.0, args.interval - (time.monotonic() - began)))
    producer.join()
    if producer.error is not None:
        raise producer.error
    committed, change_files = committed_bytes(catalog, table, setup_snapshot)
    written = sum(p.bytes_written for p, _ in pubs)
    lags = [p.lag_seconds for p, _ in pubs if p.lag_seconds is not None]
    calls = [s for _, s in pubs]
    summary = table.files().to_pylist()
    conn.close()
    return table, {
        "rows_loaded": args.rows,
        "rows_committed": producer.rows,
        "commits": producer.commits,
        "stalled_commits": producer.stalled,
        "ingest_rows_per_s": round(producer.rows / max(producer.seconds, 1e-9)),
        "target_rows_per_s": args.rate,
        "compaction_rounds": rounds,
        "compaction_s_mean": round(compaction_s / rounds, 3),
        "publications": len(pubs),
        "change_files_committed": change_files,
        "committed_mib": round(committed / MiB, 2),
        "compaction_written_mib": round(compaction_bytes / MiB, 2),
        "published_mib": round(written / MiB, 3),
        "first_publication_kib": round(first.bytes_written / KiB, 1),
        "published_per_committed": round(written / max(committed, 1), 4),
        "goal_per_committed": GOAL_RATIO,
        "position_delete_files": deletes[0],
        "position_delete_rows": deletes[1],
        "position_delete_mib": round(deletes[2] / MiB, 3),
        "partitions_rewritten_mean": round(
            statistics.mean(p.partitions_rewritten for p, _ in pubs), 2
        ),
        "lag_p50_s": round(percentile(lags, 0.5), 3),
        "lag_p95_s": round(percentile(lags, 0.95), 3),
        "lag_max_s": round(max(lags), 3),
        "goal_lag_p95_s": GOAL_P95_S,
        "publish_call_p50_s": round(percentile(calls, 0.5), 3),
        "publish_call_p95_s": round(percentile(calls, 0.95), 3),
        "live_base_files": sum(1 for f in summary if f["store"] == "base"),
        "live_change_files": sum(1 for f in summary if f["store"] == "change"),
        "base_files_with_vectors": sum(
            1 for f in summary if f["store"] == "base" and f["deletion_vector"]
        ),
        "metadata_location": pubs[-1][0].metadata_location if pubs else first.metadata_location,
    }


def read_run(catalog: firn.Catalog, table: firn.Table, metadata: str, runs: int) -> dict:
    settings = catalog.settings
    properties = catalog_properties(settings)

    def pyiceberg_read() -> pa.Table:
        return load_catalog("firn", **properties).load_table(NAME).scan().to_arrow()

    duck = duckdb_connection()

    def duckdb_read() -> pa.Table:
        return duck.execute(f"SELECT * FROM iceberg_scan('{metadata}')").to_arrow_table()

    files = table.files().to_pylist()
    root = table.storage.root.partition("?")[0].rstrip("/")
    paths = [f"{root}/{f['path']}" for f in files if f["store"] == "base"]
    listed = ", ".join(f"'{p}'" for p in paths)

    def plain_read() -> pa.Table:
        return ds.dataset(paths, format="parquet").to_table()

    def duckdb_plain() -> pa.Table:
        return duck.execute(f"SELECT * FROM read_parquet([{listed}])").to_arrow_table()

    expected = canonical(table.read())
    for reader, fn in (("pyiceberg", pyiceberg_read), ("duckdb", duckdb_read)):
        got = canonical(fn())
        if not got.equals(expected):
            raise AssertionError(
                f"{reader} read {got.num_rows} rows of the published table, Firn's read() "
                f"{expected.num_rows}: not the same rows"
            )
    plain_rows = plain_read().num_rows
    times = {
        "firn_read": best_of(runs, table.read),
        "pyiceberg": best_of(runs, pyiceberg_read),
        "duckdb_iceberg": best_of(runs, duckdb_read),
        "pyarrow_parquet": best_of(runs, plain_read),
        "duckdb_parquet": best_of(runs, duckdb_plain),
    }
    duck.close()
    return {
        "rows": expected.num_rows,
        "rows_in_base_files": plain_rows,
        "base_files": len(paths),
        "same_rows": True,
        **{f"{k}_s": round(v, 3) for k, v in times.items()},
        "pyiceberg_vs_pyarrow": round(times["pyiceberg"] / times["pyarrow_parquet"], 2),
        "duckdb_vs_duckdb_parquet": round(times["duckdb_iceberg"] / times["duckdb_parquet"], 2),
        "duckdb_vs_pyarrow": round(times["duckdb_iceberg"] / times["pyarrow_parquet"], 2),
        "firn_read_vs_pyarrow": round(times["firn_read"] / times["pyarrow_parquet"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows loaded first")
    parser.add_argument("--rate", type=int, default=20_000, help="rows/s committed")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of ingest")
    parser.add_argument("--tick", type=float, default=0.5, help="seconds between commits")
    parser.add_argument("--interval", type=float, default=5.0, help="least s between rounds")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3, help="timings per read (best kept)")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--quick", action="store_true", help="a small run (~20 s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rate, args.duration, args.interval = 200_000, 5_000, 12.0, 2.0
    with bench_catalog() as catalog:
        table, ingest = ingest_run(catalog, args)
        reads = read_run(catalog, table, ingest.pop("metadata_location"), args.runs)
    report = {"ingest": ingest, "reads": reads}
    if args.json:
        print(json.dumps(report, indent=2))
    i, r = ingest, reads
    verdict = "met" if i["published_per_committed"] <= GOAL_RATIO else "NOT met"
    lag = "met" if i["lag_p95_s"] < GOAL_P95_S else "NOT met"
    print(
        f"ingest: {i['rows_committed']:,} rows in {i['commits']} commits "
        f"({i['ingest_rows_per_s']:,} rows/s of {i['target_rows_per_s']:,} targeted, "
        f"{i['stalled_commits']} stalled) on {i['rows_loaded']:,} loaded; "
        f"{i['compaction_rounds']} compactions (mean {i['compaction_s_mean']} s), "
        f"{i['publications']} publications\n"
        f"written: {i['published_mib']} MiB published for {i['committed_mib']} MiB committed "
        f"in {i['change_files_committed']} change files: {i['published_per_committed']}x "
        f"(goal {GOAL_RATIO}x: {verdict}); compaction wrote {i['compaction_written_mib']} MiB; "
        f"{i['position_delete_files']} position delete files, "
        f"{i['position_delete_rows']:,} rows, {i['position_delete_mib']} MiB of the "
        f"published; {i['partitions_rewritten_mean']} partitions "
        f"rewritten per publication\n"
        f"lag (compaction commit to pointer moved, in-process publisher right after each "
        f"compaction: the publisher's own share): p50 {i['lag_p50_s']} s, p95 "
        f"{i['lag_p95_s']} s, max {i['lag_max_s']} s (goal p95 < {GOAL_P95_S} s: {lag}); "
        f"publish() call p50 {i['publish_call_p50_s']} s, p95 {i['publish_call_p95_s']} s\n"
        f"reads of {r['rows']:,} rows ({r['base_files']} base files, "
        f"{r['rows_in_base_files']:,} rows before deletes; published rows == read()): "
        f"pyiceberg {r['pyiceberg_s']} s, DuckDB iceberg_scan {r['duckdb_iceberg_s']} s, "
        f"Firn read() {r['firn_read_s']} s; plain Parquet: pyarrow {r['pyarrow_parquet_s']} s, "
        f"DuckDB {r['duckdb_parquet_s']} s\n"
        f"  pyiceberg / pyarrow {r['pyiceberg_vs_pyarrow']}x, DuckDB iceberg / DuckDB parquet "
        f"{r['duckdb_vs_duckdb_parquet']}x, DuckDB iceberg / pyarrow {r['duckdb_vs_pyarrow']}x, "
        f"Firn read() / pyarrow {r['firn_read_vs_pyarrow']}x",
        file=sys.stderr if args.json else sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
