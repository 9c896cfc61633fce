"""Spark ``format("firn")`` against Spark reading the same rows as plain Parquet, in
the same local session and cores, one run each (after one warm-up query each).

The table: 2M rows in 4 partitions (``region``), int64 key, three value columns,
loaded and compacted (so the plain-Parquet copy holds the same rows: the live base
files). Measured:

1. a full scan of every column into Spark's ``noop`` sink: ``format("firn")`` (one
   Spark partition per split, Arrow batches from Python workers) against
   ``spark.read.parquet`` of the same files (Spark's own vectorized reader);
2. a point lookup by whole key: ``format("firn")`` with ``pushdown`` (one split
   read) against ``spark.read.parquet`` with its own row-group statistics.

    .venv/bin/python bench/spark_read.py     # FIRN_DATABASE_URL, or a throwaway local Postgres
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np
from harness import bench_catalog  # bench/ is on sys.path when run as a script
from read import REGIONS, SCAN_ROWS, SCAN_SCHEMA, regional

import firn
import firn.spark
from firn.engine.spark_session import spark_session
from firn.settings import FirnSettings

CORES = 2


def once(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    rng = np.random.default_rng(7)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session(
        FirnSettings(spark_master=f"local[{CORES}]", spark_conf={"spark.driver.memory": "2g"}),
        app_name="firn-bench-spark-read",
    )
    firn.spark.register(spark)
    with bench_catalog() as catalog:
        table = catalog.create_table("bench_spark_scan", SCAN_SCHEMA, ["region", "id"], ["region"])
        table.commit(regional(rng, np.arange(SCAN_ROWS)))
        firn.compact(table, engine="local")
        paths = [table.storage.full_path(p) for p in table.files().column("path").to_pylist()]
        settings = catalog.settings
        assert settings.database_url is not None
        options = {
            "database_url": settings.database_url.get_secret_value(),
            "database_schema": settings.database_schema,
        }

        def firn_df(**extra: str):  # type: ignore[no-untyped-def]
            return spark.read.format("firn").options(**options, **extra).load(table.name)

        def parquet_df():  # type: ignore[no-untyped-def]
            return spark.read.parquet(*paths)

        splits = len(table.scan().splits())
        print(
            f"Spark local[{CORES}]: {SCAN_ROWS:,} rows in {len(REGIONS)} partitions, compacted: "
            f"{len(paths)} base files, {splits} splits"
        )
        assert firn_df().count() == parquet_df().count() == SCAN_ROWS  # warm-up, and a check

        def full(df_maker: Callable[[], object]) -> Callable[[], None]:
            return lambda: df_maker().write.format("noop").mode("overwrite").save()  # type: ignore[attr-defined]

        parquet_s = once(full(parquet_df))
        firn_s = once(full(firn_df))
        rate = SCAN_ROWS / 1e6
        m_rows = rate / parquet_s
        print("  full scan, every column, into the noop sink (one run each):")
        print(f"    spark.read.parquet     {parquet_s * 1000:8.1f} ms  {m_rows:6.2f} M rows/s")
        print(
            f"    format('firn')         {firn_s * 1000:8.1f} ms  {rate / firn_s:6.2f} M rows/s"
            f"   {firn_s / parquet_s:.2f}x"
        )

        key = int(rng.integers(0, SCAN_ROWS))
        region = REGIONS[key % len(REGIONS)]
        where = f"region = '{region}' AND id = {key}"
        lookup_firn = firn_df(pushdown="true").where(where)
        lookup_parquet = parquet_df().where(where)
        assert lookup_firn.count() == lookup_parquet.count() == 1  # warm-up, and a check
        parquet_s = once(lambda: parquet_df().where(where).collect())
        firn_s = once(lambda: firn_df(pushdown="true").where(where).collect())
        print(f"  point lookup ({where}), one run each:")
        print(f"    spark.read.parquet     {parquet_s * 1000:8.1f} ms")
        print(
            f"    format('firn')         {firn_s * 1000:8.1f} ms   {firn_s / parquet_s:.2f}x "
            f"({lookup_firn.rdd.getNumPartitions()} of {splits} splits read)"
        )
    spark.stop()


if __name__ == "__main__":
    main()
