"""Merge throughput: the compaction kernel on one task over 5M base + 1M change rows,
next to the pyarrow read-sort-write floor and a plain Spark SQL window dedup of the
same files.

The table is unpartitioned, keyed by an int64 ``id``, with four value columns (int64,
float64, a 16-character string, a timestamp) and ``base.buckets = 1``,
``change.buckets = 1``, ``task.max-bytes`` far above the input, so the planner makes
one task that covers the whole table. Setup (not timed): 5M upserts in 5 commits,
``firn.compact(table, engine="local")`` to turn them into base files, then 1M change
rows in 10 commits (80 % upserts, keys drawn over 1.2x the base key space so about a
sixth are new keys; 20 % deletes of base keys). Then, on the same files:

- engine: ``run_task`` on the planned task, in this process, memory budget 8 GiB;
- floor: pyarrow reads the base and insert files, sorts by key, writes one zstd
  Parquet file (no dedup: the least any merge that rewrites the data pays);
- spark: the base (seq 0) and change files (their catalog seq) as one DataFrame,
  ``row_number() over (partition by id order by seq desc, _ord desc)``, keep the
  first row of each key unless it is a delete, write zstd Parquet (``local[*]``,
  ``spark.driver.memory`` 4g, the session's first run absorbs the JVM warm-up).

Rates count each contender's own input (rows read, bytes of the files read); the
floor does not read the delete files. The engine's output is checked row for row
against ``Table.read()``, and the Spark output's row count against both. Goals
(ratios of rows/s): engine >= 5x Spark and >= 0.5x the floor. Each contender runs
``--runs`` times and the best run counts; Spark's log goes to stderr.

    .venv/bin/python bench/merge.py                 # full size: several minutes
    .venv/bin/python bench/merge.py --base-rows 500000 --change-rows 100000 --runs 1
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from harness import (  # bench/ is on sys.path when run as a script
    ORDERS,
    bench_catalog,
    best_of,
    one_task,
    order_rows,
)

import firn
from firn.engine.kernel import KernelLimits, run_task
from firn.model.tasks import TaskResult, TaskSpec

NAMES = ORDERS.names
BASE_COMMITS = 5
MEMORY_BUDGET = 8 << 30


def rows(rng: np.random.Generator, ids: np.ndarray, ops: np.ndarray) -> pa.Table:
    """A change set: the given keys with random values and ``_op``."""
    return order_rows(rng, ids).append_column("_op", pa.array(ops, pa.string()))


def change_set(rng: np.random.Generator, n: int, base_rows: int) -> pa.Table:
    """80 % upserts over 1.2x the base key space, 20 % deletes of base keys, mixed."""
    upserts = int(n * 0.8)
    ids = np.concatenate(
        [rng.integers(0, base_rows * 6 // 5, upserts), rng.integers(0, base_rows, n - upserts)]
    )
    ops = np.array(["U"] * upserts + ["D"] * (n - upserts))
    order = rng.permutation(n)
    return rows(rng, ids[order], ops[order])


def setup(table: firn.Table, args: argparse.Namespace) -> None:
    rng = np.random.default_rng(11)
    ids = rng.permutation(args.base_rows)
    began = time.perf_counter()
    for part in np.array_split(ids, BASE_COMMITS):
        table.commit(rows(rng, part, np.full(len(part), "U")))
    committed = time.perf_counter() - began
    summary = firn.compact(table, engine="local")
    assert summary["failed_attempts"] == 0, summary["errors"]
    compacted = time.perf_counter() - began - committed
    base_files = table.files().num_rows
    batches = [
        change_set(rng, len(part), args.base_rows)
        for part in np.array_split(np.arange(args.change_rows), args.commits)
    ]
    began = time.perf_counter()
    for batch in batches:
        table.commit(batch)
    print(
        f"setup: {args.base_rows:,} base rows committed in {committed:.1f} s, compacted in "
        f"{compacted:.1f} s into {base_files} base file(s); {args.change_rows:,} change rows "
        f"in {args.commits} commits in {time.perf_counter() - began:.1f} s"
    )


def sorted_by_id(rows: pa.Table) -> pa.Table:
    return rows.take(pc.sort_indices(rows, sort_keys=[("id", "ascending")])).combine_chunks()


def spark_merge(
    table: firn.Table, spec: TaskSpec, memory: str, runs: int
) -> tuple[float, int, int]:
    """Seconds, output rows and input rows of the best Spark run."""
    from pyspark.sql import DataFrame, Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from firn.engine.spark_session import spark_session

    settings = firn.FirnSettings(spark_conf={"spark.driver.memory": memory})
    spark = spark_session(settings, app_name="firn-bench-merge")
    full = table.storage.full_path
    base_paths = [full(f.path) for f in spec.base_files]
    base_schema = spark.read.parquet(base_paths[0]).select(*NAMES).schema
    types = {f.name: f.dataType for f in base_schema.fields}

    def schema_of(file_type: str, columns: list[str]) -> StructType:
        first = next(f for f in spec.change_files if f.file_type == file_type)
        return spark.read.parquet(full(first.path)).select(*columns).schema

    change_schema = {"I": schema_of("I", [*NAMES, "_ord"]), "D": schema_of("D", ["id", "_ord"])}
    out_root = Path(tempfile.mkdtemp(prefix="firn-bench-spark-"))
    outs: list[Path] = []

    def frame() -> DataFrame:
        parts = [
            spark.read.schema(base_schema)
            .parquet(*base_paths)
            .select(
                *NAMES, F.lit(0).cast("long").alias("_seq"), F.lit(0).cast("long").alias("_ord")
            )
            .withColumn("_op", F.lit("U"))
        ]
        for f in spec.change_files:
            df = spark.read.schema(change_schema[f.file_type]).parquet(full(f.path))
            if f.file_type == "D":
                df = df.select(
                    "id",
                    *(F.lit(None).cast(types[c]).alias(c) for c in NAMES[1:]),
                    "_ord",
                )
            parts.append(
                df.select(*NAMES, F.lit(f.seq).cast("long").alias("_seq"), "_ord").withColumn(
                    "_op", F.lit("D" if f.file_type == "D" else "U")
                )
            )
        return functools.reduce(DataFrame.unionByName, parts)

    def run() -> None:
        out = out_root / f"run-{len(outs)}"
        outs.append(out)
        latest = Window.partitionBy("id").orderBy(F.col("_seq").desc(), F.col("_ord").desc())
        (
            frame()
            .withColumn("_rn", F.row_number().over(latest))
            .where("_rn = 1 AND _op = 'U'")
            .select(*NAMES)
            .write.option("compression", "zstd")
            .parquet(str(out))
        )

    try:
        seconds = best_of(runs, run)
        out_rows = spark.read.parquet(str(outs[0])).count()
        in_rows = frame().count()
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    return seconds, out_rows, in_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-rows", type=int, default=5_000_000)
    parser.add_argument("--change-rows", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3, help="best of this many per contender")
    parser.add_argument("--spark-memory", default="4g", help="spark.driver.memory (local mode)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark contender")
    args = parser.parse_args()
    properties = {
        "base.buckets": 1,
        "change.buckets": 1,
        "target-file-size": "128MiB",
        "task.max-bytes": "1TiB",
    }
    with bench_catalog() as catalog:
        table = catalog.create_table("bench_merge", ORDERS, ["id"], properties=properties)
        setup(table, args)
        spec = one_task(table)
        full = table.storage.full_path
        expected = table.read()
        print(
            f"task: {len(spec.base_files)} base + {len(spec.change_files)} change files, "
            f"{spec.input_bytes / 1e6:.1f} MB; merged view {expected.num_rows:,} rows"
        )

        # (a) the engine
        results: list[TaskResult] = []
        limits = KernelLimits(memory_budget=MEMORY_BUDGET)

        def engine() -> None:
            results.append(run_task(table.definition, spec, len(results) + 1, limits))

        engine_s = best_of(args.runs, engine)
        result = results[0]
        engine_out = pa.concat_tables(
            pq.read_table(full(o.path), schema=ORDERS) for o in result.outputs
        )
        same = sorted_by_id(engine_out).equals(sorted_by_id(expected.cast(ORDERS)))
        del engine_out

        # (b) the pyarrow read-sort-write floor
        floor_files = [*spec.base_files, *(f for f in spec.change_files if f.file_type == "I")]
        floor_paths = [full(f.path) for f in floor_files]
        scratch = Path(tempfile.mkdtemp(prefix="firn-bench-floor-"))

        def floor() -> None:
            rows = ds.dataset(floor_paths, schema=ORDERS, format="parquet").to_table()
            rows = rows.take(pc.sort_indices(rows, sort_keys=[("id", "ascending")]))
            pq.write_table(rows, scratch / "out.parquet", compression="zstd")

        try:
            floor_s = best_of(args.runs, floor)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        floor_rows = sum(f.record_count for f in floor_files)
        floor_bytes = sum(f.size_bytes for f in floor_files)

        contenders = [
            ("engine (run_task)", engine_s, result.rows_read, spec.input_bytes),
            ("pyarrow floor", floor_s, floor_rows, floor_bytes),
        ]
        spark_out = None
        if not args.no_spark:
            spark_s, spark_out, spark_in = spark_merge(table, spec, args.spark_memory, args.runs)
            contenders.append(("spark window dedup", spark_s, spark_in, spec.input_bytes))

    rate = {name: n / s for name, s, n, _ in contenders}
    print(f"{'':<20} {'seconds':>8} {'M rows/s':>9} {'MB/s':>7} {'rows in':>11}")
    for name, seconds, n, size in contenders:
        mb_s = size / seconds / 1e6
        print(f"{name:<20} {seconds:8.2f} {n / seconds / 1e6:9.2f} {mb_s:7.1f} {n:11,}")
    ratio = rate["engine (run_task)"] / rate["pyarrow floor"]
    print(
        f"engine / floor: {ratio:.2f}x rows/s (goal >= 0.5: {'met' if ratio >= 0.5 else 'MISSED'})"
    )
    if spark_out is not None:
        ratio = rate["engine (run_task)"] / rate["spark window dedup"]
        print(
            f"engine / spark: {ratio:.2f}x rows/s (goal >= 5: {'met' if ratio >= 5 else 'MISSED'})"
        )
    print(
        f"check: engine wrote {result.rows_written:,} rows in {len(result.outputs)} file(s), "
        f"read() has {expected.num_rows:,}, same rows: {same}"
        + ("" if spark_out is None else f"; spark wrote {spark_out:,}")
        + ("" if same and spark_out in (None, expected.num_rows) else "  <-- MISMATCH")
    )


if __name__ == "__main__":
    main()
