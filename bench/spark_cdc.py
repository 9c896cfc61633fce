"""Spark users' whole path, Firn against Iceberg's own Spark connector, on one CDC
workload in the same cores: a bulk load, commits of changes, a full read before
compaction, a read of two of its columns (``read_pruned``: ``select("qty",
"name")``, what Spark's column pruning makes of it) and a point lookup of one key
(``read_key``: Spark's filter ``id = ...``, which prunes what each side reads), the
compaction, the same three reads after it. One more load (``load_unordered``) writes the
same rows with their ids permuted into a table of its own: the base's ids come in order,
and Spark, knowing a range's order, skips the sort Firn's loader asks for by an int id.

The workload (``bench/spark_cdc_workload.py``, generated in Spark SQL so both sides
write the same rows): ``--rows`` base rows (int64 key, int64, float64, string,
timestamp), then ``--commits`` change sets of ``--changes`` rows in all (distinct
keys per commit, a fifth deletes, a tenth of the upserts new keys).

- **Firn**, in this process (the project's pyspark): the table made with the Python
  API, then ``firn.spark.write(df, name, "overwrite")`` (load, by the JVM loader;
  ``df.write.format("firn").mode("overwrite")`` is timed too, as ``load_source``: the
  JVM loader too when the DataFrame is exactly the table's columns, which it is here),
  ``firn.spark.write(df, name, "append")`` with an ``_op`` column (each commit: the
  ``firn`` source, its rows first shuffled by change node),
  ``spark.read.format("firn")`` and ``firn.spark.read`` (reads: the ``firn`` format,
  which is the JVM merge reader when it takes every split, ``firn.spark.jvm_format``,
  and the read that hands compacted splits to Spark's Parquet reader),
  ``firn.compact(table, engine="spark", spark=spark)`` (a major compaction as a Spark
  job in the same session).
- **Iceberg** (``bench/spark_cdc_iceberg.py``, in ``.firn/spark-4.1``: no Iceberg
  runtime on Maven Central loads in pyspark 4.3), a Hadoop catalog in a temporary
  directory: a format-version 3 table with merge-on-read deletes; ``writeTo(...)
  .append()`` (load: twice, into a table of its own first, as Firn's side loads
  twice; a session's first big write is the slowest on either side, so
  ``load_source`` is set against Iceberg's first load and ``load`` against its
  second), ``MERGE INTO`` (each commit), ``spark.table`` (reads),
  ``rewrite_data_files`` with ``rewrite-all`` (compaction).

Both: ``local[--cores]``, driver memory ``--driver-memory``, session time zone UTC,
Spark's defaults otherwise; each session first writes and reads ``WARM_UP_ROWS`` (1M)
rows of a table of its own, not timed (Spark starting its Python workers, or loading
Iceberg's classes, and the JVM compiling each side's writer are paid once per session,
not per load); before each load and each compaction each side touches and frees
``--warm-gib`` (4) GiB of memory outside the clock (``bench/warm_memory.py``: this VM's
first touch of memory costs 1-3 s a GiB, and Firn's load, which sorts its rows, touched
more of it than Iceberg's: a 5M-row string-keyed load through ``format("firn")`` took
4.77 and 4.13 s the first two times in a session and 3.03-3.07 s after, and 3.07-3.58 s
from the first when the JVM touched its heap at start). Reads go into Spark's ``noop``
sink, best of ``--runs`` (10) after a warm-up read, whose time is reported too (a
job that reads once sees that one; ``format("firn")`` and ``firn.spark.read`` of the
same table take turns, so neither is timed on code the other's runs compiled);
loads, commits and compactions are timed once.
The two tables' summaries (rows, sum of ids, sum of qty) must agree before and after
compaction.

    .venv/bin/python bench/spark_cdc.py                     # 5M rows, 10 x 100k changes
    .venv/bin/python bench/spark_cdc.py --rows 1000000 --changes 200000   # quicker
    .venv/bin/python bench/spark_cdc.py --key string    # string keys on both sides
    .venv/bin/python bench/spark_cdc.py --rounds 3      # three rounds, each ratio's median
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from harness import REPO, bench_catalog  # bench/ is on sys.path when run as a script
from iceberg_spark import (
    ICEBERG_RUNTIME,
    POSTGRES_DRIVER,
    READER,
    jar,
    run_spark_side,
    spark_properties,
    spark_python,
)
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from spark_cdc_workload import (
    PRUNED,
    WARM_UP_ROWS,
    alternating_read_times,
    base,
    changes,
    lookup,
    read_time,
    summary,
    timed,
)

import firn
import firn.spark
import firn.spark.jvm
import firn.spark.native
from firn.engine.spark_session import spark_session
from firn.iceberg.names import iceberg_name
from firn.iceberg.publisher import DEFAULT_CATALOG, Publisher
from firn.postgres.connection import connect
from firn.settings import FirnSettings

NAME = "bench_spark_cdc"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("price", pa.float64()),
        pa.field("name", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)
ICEBERG_SIDE = Path(__file__).with_name("spark_cdc_iceberg.py")
FLOOR_RUNS = 3
PYTHON_RUNS = 3
"""Timed reads by Firn's Python source (``read_python_*``): a floor, seconds each."""
"""Most timed runs of the Python floors (no Firn code in them: nothing to compile)."""

STAGES = (
    "load_s",
    "load_unordered_s",
    "commit_s",
    "read_before_s",
    "read_pruned_before_s",
    "read_key_before_s",
    "compact_s",
    "read_after_s",
    "read_pruned_after_s",
    "read_key_after_s",
)


class HeldRowsReader(DataSourceReader):
    """The read floor of any Python source: ``rows`` rows of the workload's columns,
    made once per Python worker and held, handed to Spark again at every read."""

    def __init__(self, rows: int, parts: int) -> None:
        self.rows, self.parts = rows, parts

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import builtins

        import numpy as np

        held = builtins.__dict__.setdefault("_firn_bench_held", {})
        key = (self.rows, self.parts, partition.value)
        if key not in held:
            n = self.rows // self.parts
            ids = np.arange(partition.value * n, (partition.value + 1) * n, dtype=np.int64)
            names = np.char.add("name-", (ids % 10007).astype(str))
            stamps = (1_700_000_000 + ids) * 1_000_000
            columns = {
                "id": ids,
                "qty": ids % 1000,
                "price": (ids % 9973) / 7.0,
                "name": pa.array(names),
                "ts": pa.array(stamps, pa.timestamp("us", "UTC")),
            }
            held[key] = pa.table(columns).to_batches(131_072)
        yield from held[key]


class HeldRows(DataSource):
    @classmethod
    def name(cls) -> str:
        return "firn_bench_held_rows"

    def schema(self) -> str:
        return "id long, qty long, price double, name string, ts timestamp"

    def reader(self, schema: Any) -> HeldRowsReader:
        return HeldRowsReader(int(self.options["rows"]), int(self.options["parts"]))


def drained(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch.slice(0, 0)


def python_floors(spark: Any, args: argparse.Namespace, parts: int) -> dict[str, float]:
    """What moving the rows between Spark and Python costs, with no Firn in it: the
    base rows handed to Python and dropped (``mapInArrow``: what a write's tasks
    receive), and a Python source's held rows handed to Spark (what a read sends)."""
    spark.dataSource.register(HeldRows)
    schema = base(spark, 1).schema
    into = lambda: base(spark, args.rows).mapInArrow(drained, schema)  # noqa: E731
    held = lambda: (  # noqa: E731
        spark.read.format(HeldRows.name()).option("rows", args.rows).option("parts", parts).load()
    )
    runs = min(args.runs, FLOOR_RUNS)
    return {"to_python_s": read_time(into, runs), "from_python_s": read_time(held, runs)}


def firn_side(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {"spark.driver.memory": args.driver_memory, "spark.sql.session.timeZone": "UTC"}
    spark = spark_session(
        FirnSettings(spark_master=f"local[{args.cores}]", spark_conf=conf),
        app_name="firn-bench-spark-cdc",
    )
    spark.sparkContext.setLogLevel("ERROR")
    firn.spark.register(spark)
    out: dict[str, Any] = {"spark_version": spark.version}
    try:
        with bench_catalog() as catalog:
            properties = dict(p.split("=", 1) for p in args.firn_property)
            schema = keyed(SCHEMA, args.key)
            key, unpruned = lookup(args.key), lookup(args.key, pruned=False)
            table = catalog.create_table(NAME, schema, ["id"], properties=properties)
            settings = catalog.settings
            assert settings.database_url is not None
            options = {
                "database_url": settings.database_url.get_secret_value(),
                "database_schema": settings.database_schema,
            }

            def write(df: Any, mode: str) -> None:
                df.write.format("firn").mode(mode).options(**options).save(NAME)

            def read() -> Any:
                return spark.read.format("firn").options(**options).load(NAME)

            def read_python() -> Any:
                # Firn's Python source, which format("firn") is where the JVM merge
                # reader does not take a read (firn.spark.register names it so).
                return spark.read.format("firn-python").options(**options).load(NAME)

            def read_native() -> Any:
                return firn.spark.read(spark, NAME, **options)

            # The session's first write and read start its Python workers and ship
            # Firn's code to them (as Iceberg's side loads its classes): not timed.
            catalog.create_table(f"{NAME}_warm_up", schema, ["id"])
            warm_up = f"{NAME}_warm_up"
            out["warm_up_s"] = timed(
                lambda: (
                    base(spark, WARM_UP_ROWS, args.key)
                    .write.format("firn")
                    .mode("overwrite")
                    .options(**options)
                    .save(warm_up),
                    spark.read.format("firn").options(**options).load(warm_up).count(),
                )
            )
            firn.spark.write(base(spark, WARM_UP_ROWS, args.key), warm_up, "overwrite", **options)
            # An append: the Python workers that write change sets (format("firn")'s
            # loads are the JVM loader's now, so the warm-up load starts none).
            firn.spark.write(
                changes(spark, WARM_UP_ROWS, 0, 1000, args.key), warm_up, "append", **options
            )
            # The same load twice: by format("firn"), then by firn.spark.write (the JVM
            # loader), which replaces it. Iceberg's side loads twice too: a session's
            # first big write is slower than its later ones on either side.
            out["load_source_s"] = timed(
                lambda: write(base(spark, args.rows, args.key), "overwrite"), args.warm_gib
            )
            out["load_source_by_loader"] = written_by_loader(table)
            out["load_s"] = timed(
                lambda: firn.spark.write(
                    base(spark, args.rows, args.key), NAME, "overwrite", **options
                ),
                args.warm_gib,
            )
            out["load_files"] = table.files().num_rows
            out["load_by_loader"] = written_by_loader(table)
            # The same rows in an order Spark does not know, into a table of their own:
            # the loader sorts them (a load of int ids in order sorts nothing, Spark
            # knowing a range's order), where Iceberg's append writes them as they come.
            unordered = catalog.create_table(f"{NAME}_unordered", schema, ["id"])
            out["load_unordered_s"] = timed(
                lambda: firn.spark.write(
                    base(spark, args.rows, args.key, ordered=False),
                    unordered.name,
                    "overwrite",
                    **options,
                ),
                args.warm_gib,
            )
            each = args.changes // args.commits
            # firn.spark.write shuffles each change set by change node first: one file
            # per node and operation, not one per task too (firn.spark.clustering).
            out["commit_s"] = sum(
                timed(
                    lambda c=c: firn.spark.write(
                        changes(spark, args.rows, c, each, args.key), NAME, "append", **options
                    )
                )
                for c in range(args.commits)
            )
            out["before"] = summary(read())
            out["native_before"] = summary(read_native())
            # The two reads of the merged view take turns (alternating_read_times).
            reads = alternating_read_times({"format": read, "native": read_native}, args.runs)
            out["read_before_first_s"], out["read_before_s"] = reads["format"]
            out["read_before_native_first_s"], out["read_before_native_s"] = reads["native"]
            out["read_pruned_before_s"] = read_time(lambda: read().select(*PRUNED), args.runs)
            out["read_python_before_s"] = read_time(read_python, PYTHON_RUNS)
            out["read_key_before_s"] = read_time(lambda: read().where(key), args.runs)
            out["key_scan_before"] = scan_text(read().where(key))
            out["read_key_unpruned_before_s"] = read_time(lambda: read().where(unpruned), args.runs)
            out["key_rows_before"] = [
                sorted(map(str, read().where(k).collect())) for k in (key, unpruned)
            ]
            out["splits_before"] = split_ways(spark, NAME, options)
            out["files_before"] = table.files().num_rows
            compacted = timed(
                lambda: firn.compact(table, engine="spark", spark=spark), args.warm_gib
            )
            out["compact_s"] = compacted
            out["after"] = summary(read())
            out["native_after"] = summary(read_native())
            # The two reads of the merged view take turns (alternating_read_times).
            reads = alternating_read_times({"format": read, "native": read_native}, args.runs)
            out["read_after_first_s"], out["read_after_s"] = reads["format"]
            out["read_after_native_first_s"], out["read_after_native_s"] = reads["native"]
            out["read_pruned_after_s"] = read_time(lambda: read().select(*PRUNED), args.runs)
            out["read_python_after_s"] = read_time(read_python, PYTHON_RUNS)
            out["read_key_after_s"] = read_time(lambda: read().where(key), args.runs)
            out["key_scan_after"] = scan_text(read().where(key))
            out["read_key_unpruned_after_s"] = read_time(lambda: read().where(unpruned), args.runs)
            out["key_rows_after"] = [
                sorted(map(str, read().where(k).collect())) for k in (key, unpruned)
            ]
            out["splits_after"] = split_ways(spark, NAME, options)
            files = table.files().to_pylist()
            out["files_after"] = len(files)
            out["vectors_after"] = sum(1 for f in files if f["deletion_vector"])
            out.update(python_floors(spark, args, len(table.scan().splits())))
            spark.stop()
            if not args.no_published:
                out.update(published_read(catalog, table, args))
    finally:
        spark.stop()
    return out


def keyed(schema: pa.Schema, key: str) -> pa.Schema:
    """``schema`` with ``id`` of the ``--key`` type."""
    types = {
        "int": pa.int64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "decimal": pa.decimal128(20, 0),
    }
    return schema.set(0, pa.field("id", types[key], nullable=False))


def scan_text(df: Any) -> str:
    """What the DataFrame's scan reads, as its physical plan names it (the merge
    reader's ``firn-merge(N tasks, C of T columns, S of T splits)``)."""
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    return next((line.strip() for line in plan.splitlines() if "BatchScan" in line), plan)[:300]


def written_by_loader(table: Any) -> bool:
    """Whether the table's live files were written by the JVM loader (Spark's Parquet
    writer leaves its schema in the footer; pyarrow does not)."""
    paths = table.files().column("path").to_pylist()
    return bool(paths) and all(
        b"org.apache.spark.sql.parquet.row.metadata"
        in (pq.read_metadata(table.storage.full_path(p)).metadata or {})
        for p in paths
    )


def split_ways(spark: Any, name: str, options: dict[str, str]) -> list[int]:
    """How ``firn.spark.read`` reads the table's splits: [by Spark's Parquet reader, by
    the JVM merge reader, by the firn Python source]."""
    plan = firn.spark.native.plan_read(name, **options)
    by_jvm = 0
    if firn.spark.jvm.loaded(spark):
        by_jvm = sum(firn.spark.jvm.jvm_mergeable(s, plan.schema_id) for s in plan.merging)
    return [len(plan.native), by_jvm, len(plan.merging) - by_jvm]


def published_read(
    catalog: firn.Catalog, table: firn.Table, args: argparse.Namespace
) -> dict[str, Any]:
    """The compacted table published as an Iceberg table (``Publisher.publish``, what
    the publisher service does after each compaction), read by Spark with Iceberg's
    own runtime (``bench/iceberg_spark_read.py`` in ``.firn/spark-4.1``): no Firn code
    and no Python between the files and Spark. Its summary must equal Firn's."""
    conn = connect(catalog.settings, autocommit=True)
    try:
        publication = Publisher(conn).publish(table.name)
    finally:
        conn.close()
    assert publication.outcome == "published", publication
    files = table.files().to_pylist()
    base = [table.storage.full_path(f["path"]) for f in files if f["store"] == "base"]
    out = Path(tempfile.mkdtemp(prefix="spark-cdc-published-", dir=REPO / ".firn"))
    job = {
        "jars": [str(jar(args.iceberg_runtime)), str(jar(POSTGRES_DRIVER))],
        "catalog": DEFAULT_CATALOG,
        "properties": spark_properties(catalog.settings),
        "table": str(iceberg_name(table.name)),
        "versions": [],
        "base_files": [f if "://" in f else f"file://{f}" for f in base],
        "out": str(out),
        "runs": args.runs,
        "cores": args.cores,
        "driver_memory": args.driver_memory,
    }
    try:
        report = run_spark_side(spark_python(args.spark_python), READER, job)
        published = pq.read_table(out / "current")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "read_published_s": report["iceberg_s"],
        "published": [
            published.num_rows,
            pc.sum(pc.cast(published.column("id"), pa.int64())).as_py(),
            pc.sum(published.column("qty")).as_py(),
        ],
        "published_delete_files": report["delete_files"],
        "parquet_s": report["parquet_s"],
    }


def iceberg_job(args: argparse.Namespace, warehouse: str, key: str) -> dict[str, Any]:
    """The job ``spark_cdc_iceberg.py`` reads: the workload's sizes from ``args``."""
    return {
        "jars": [str(jar(args.iceberg_runtime))],
        "warehouse": warehouse,
        "rows": args.rows,
        "commits": args.commits,
        "changes": args.changes,
        "runs": args.runs,
        "cores": args.cores,
        "driver_memory": args.driver_memory,
        "key": key,
        "warm_gib": getattr(args, "warm_gib", 0.0),
    }


def iceberg_side(args: argparse.Namespace) -> dict[str, Any]:
    python = spark_python(args.spark_python)
    with tempfile.TemporaryDirectory(prefix="iceberg-cdc-", dir=REPO / ".firn") as warehouse:
        job = iceberg_job(args, f"file://{warehouse}", args.key)
        return run_spark_side(python, ICEBERG_SIDE, job)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="base rows")
    parser.add_argument("--changes", type=int, default=1_000_000, help="change rows in all")
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument(
        "--runs",
        type=int,
        default=10,
        help="timings per read after a warm-up read (best kept; the warm-up read is "
        "reported too): Firn's JVM merge reader runs only in reads, so its code is "
        "compiled over the first several, where Iceberg's MERGE INTO commits have "
        "already run Spark's Parquet reading many times",
    )
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument(
        "--key",
        choices=("int", "string", "binary", "decimal"),
        default="int",
        help="the key column's type on both sides: string keys are the ids' digits, "
        "zero-padded to 12; binary keys those digits' bytes; decimal keys the ids as "
        "DECIMAL(20,0)",
    )
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument(
        "--warm-gib",
        type=float,
        default=4.0,
        help="GiB of fresh memory each side touches and frees before each load and its "
        "compaction (bench/warm_memory.py: this VM's first touch of memory costs 1-3 s "
        "a GiB, which a side whose load sorts its rows pays more of); 0: none",
    )
    parser.add_argument("--spark-python", help="Python with a pyspark Iceberg supports")
    parser.add_argument("--iceberg-runtime", default=ICEBERG_RUNTIME, help="Maven coordinate")
    parser.add_argument("--only", choices=("firn", "iceberg"), help="run one side (no comparison)")
    parser.add_argument(
        "--firn-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property of Firn's table (repeatable), e.g. deletion-vectors.max-ratio=0: "
        "compaction rewrites every base file it touches, so firn.spark.read hands every "
        "compacted split to Spark's Parquet reader",
    )
    parser.add_argument(
        "--no-published",
        action="store_true",
        help="skip reading Firn's published Iceberg table with Iceberg's Spark runtime",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the whole comparison this many times (each side's session anew, the "
        "sides in turns) and print each stage's ratio in every round and their median: "
        "one round's ratios swing by a fifth or more on this VM",
    )
    args = parser.parse_args()
    malformed = [p for p in args.firn_property if "=" not in p]
    if malformed:
        parser.error(f"--firn-property takes KEY=VALUE, got {malformed}")
    if args.rounds < 1:
        parser.error("--rounds takes a positive number")
    failures = 0
    rounds: list[dict[str, dict[str, Any]]] = []
    for number in range(1, args.rounds + 1):
        if args.rounds > 1:
            print(f"round {number} of {args.rounds}", flush=True)
        sides: dict[str, dict[str, Any]] = {}
        if args.only != "iceberg":
            sides["firn"] = firn_side(args)
            print(f"firn: {json.dumps(sides['firn'])}", file=sys.stderr, flush=True)
        if args.only != "firn":
            sides["iceberg"] = iceberg_side(args)
            print(f"iceberg: {json.dumps(sides['iceberg'])}", file=sys.stderr, flush=True)
        failures += report(args, sides)
        rounds.append(sides)
    if args.rounds > 1 and args.only is None:
        print_round_ratios(rounds)
    return 1 if failures else 0


RATIOS = {
    **{stage: (stage, stage) for stage in STAGES},
    "load_source_s": ("load_source_s", "load_first_s"),
    "read_before_native_s": ("read_before_native_s", "read_before_s"),
    "read_after_native_s": ("read_after_native_s", "read_after_s"),
}
"""Each stage whose ratio ``--rounds`` summarises: Firn's figure and Iceberg's it is set
against (as the one-round report sets them)."""


def print_round_ratios(rounds: list[dict[str, dict[str, Any]]]) -> None:
    """Each stage's Firn / Iceberg ratio in every round, and their median."""
    print(f"firn / iceberg in each of {len(rounds)} rounds, and the median")
    for stage, (ours, theirs) in RATIOS.items():
        ratios = [r["firn"][ours] / r["iceberg"][theirs] for r in rounds]
        each = " ".join(f"{x:.2f}x" for x in ratios)
        print(f"{stage[:-2]:<22}{each}   median {statistics.median(ratios):.2f}x")


def report(args: argparse.Namespace, sides: dict[str, dict[str, Any]]) -> int:
    """Prints one round's table, notes and checks; how many checks failed."""
    print(
        f"{args.rows:,} base rows, {args.commits} commits of {args.changes // args.commits:,} "
        f"changes, {args.key} keys; Spark local[{args.cores}], driver {args.driver_memory}"
    )
    names = list(sides)
    print(
        f"{'stage':<22}"
        + "".join(f"{n:>12}" for n in names)
        + ("   firn / iceberg" if len(sides) == 2 else "")
    )
    for stage in STAGES:
        values = [sides[n][stage] for n in names]
        line = f"{stage[:-2]:<22}" + "".join(f"{v:11.2f}s" for v in values)
        if len(values) == 2:
            line += f"   {values[0] / values[1]:.2f}x"
        print(line)
    print(
        f"  (read_pruned: the same read, select({', '.join(PRUNED)}); "
        f"read_key: where {lookup(args.key)})"
    )
    if "firn" in sides:
        f = sides["firn"]
        print(
            f"  (firn's key reads: {f['key_scan_before']} before compaction, "
            f"{f['key_scan_after']} after; the same lookup unpruned, where "
            f"{lookup(args.key, pruned=False)}: "
            f"{f['read_key_unpruned_before_s']:.2f} s before, "
            f"{f['read_key_unpruned_after_s']:.2f} s after)"
        )
        print(
            f'  (the same reads by Firn\'s Python source, format("firn-python"): '
            f"{f['read_python_before_s']:.2f} s before compaction, "
            f"{f['read_python_after_s']:.2f} s after)"
        )
    if "firn" in sides:
        f = sides["firn"]
        print(
            f"floors of any Python source or sink (no Firn): the base rows handed to Python "
            f"and dropped {f['to_python_s']:.2f} s (a load's share: "
            f"{f['to_python_s'] / f['load_s']:.0%}); as many rows held in Python handed to "
            f"Spark {f['from_python_s']:.2f} s (a read after compaction's share: "
            f"{f['from_python_s'] / f['read_after_s']:.0%})"
        )
    failures = 0
    if "firn" in sides:
        f = sides["firn"]
        line = f"{'load_source':<22}{f['load_source_s']:11.2f}s"
        if "iceberg" in sides:
            line += f"{sides['iceberg']['load_first_s']:11.2f}s"
            line += f"   {f['load_source_s'] / sides['iceberg']['load_first_s']:.2f}x"
        print(line)
        print(
            f"  (load: firn.spark.write, by "
            f"{'the JVM loader' if f.get('load_by_loader') else 'the Python source'}, "
            f"{f['load_files']} base files; "
            f'load_source: df.write.format("firn"), by '
            f"{'the JVM loader' if f.get('load_source_by_loader') else 'the Python source'}; "
            "each side loads twice and each load is set against the other side's of the "
            "same place in the session: load_source against Iceberg's first, load against "
            "its second; load_unordered: the same rows, ids permuted, which Firn's loader "
            "sorts and Iceberg's append writes as they come, each side into a table of its "
            "own)"
        )
        for when in ("before", "after"):
            native = f[f"read_{when}_native_s"]
            line = f"{'read_' + when + '_native':<22}{native:11.2f}s"
            if "iceberg" in sides:
                line += f"{sides['iceberg'][f'read_{when}_s']:11.2f}s"
                line += f"   {native / sides['iceberg'][f'read_{when}_s']:.2f}x"
            print(line)
            first = f[f"read_{when}_native_first_s"]
            line = f"{'  its first read':<22}{first:11.2f}s"
            if "iceberg" in sides:
                theirs = sides["iceberg"][f"read_{when}_first_s"]
                line += f"{theirs:11.2f}s   {first / theirs:.2f}x"
            print(line)
            same = f[f"native_{when}"] == f[when]
            failures += not same
            print(
                f'{"PASS" if same else "FAIL"}: firn.spark.read agrees with format("firn") '
                f"{when} compaction ({f[f'native_{when}']} against {f[when]})"
            )
        for when in ("before", "after"):
            pruned, whole = f[f"key_rows_{when}"]
            same = pruned == whole
            failures += not same
            print(
                f"{'PASS' if same else 'FAIL'}: the lookup {when} compaction finds what the "
                f"unpruned one does ({len(pruned)} against {len(whole)} rows)"
            )
        print(
            "  (firn.spark.read: splits by Spark's Parquet reader / the JVM merge reader / "
            f"the firn source: before compaction {' / '.join(map(str, f['splits_before']))}, "
            f"after {' / '.join(map(str, f['splits_after']))})"
        )
    published = sides.get("firn", {}).get("read_published_s")
    if published is not None:
        f = sides["firn"]
        line = f"{'read_after_published':<22}{published:11.2f}s" + (
            f"{sides['iceberg']['read_after_s']:11.2f}s" if "iceberg" in sides else ""
        )
        if "iceberg" in sides:
            line += f"   {published / sides['iceberg']['read_after_s']:.2f}x"
        print(line)
        print(
            f"  (Firn's compacted table as published for other engines, read by Spark with "
            f"Iceberg's runtime: {f['published_delete_files']} position delete files; "
            f"spark.read.parquet of its live base files, deletes not applied, "
            f"{f['parquet_s']:.2f} s)"
        )
        same = f["published"] == f["after"]
        failures += not same
        print(
            f"{'PASS' if same else 'FAIL'}: the published view agrees with Firn's read after "
            f"compaction ({f['published']} against {f['after']})"
        )
    if len(sides) == 2:
        for when in ("before", "after"):
            same = sides["firn"][when] == sides["iceberg"][when]
            failures += not same
            print(
                f"{'PASS' if same else 'FAIL'}: the tables agree {when} compaction "
                f"(rows, sum of ids, sum of qty: firn {sides['firn'][when]}, "
                f"iceberg {sides['iceberg'][when]})"
            )
    return failures


if __name__ == "__main__":
    sys.exit(main())
