"""The Spark side of ``bench/iceberg_spark.py``: no Firn code, only pyspark and
Iceberg's own Spark runtime jar (plus the Postgres JDBC driver).

It runs in whichever Python has a pyspark that Iceberg's runtime supports (a venv of
its own when the project's pyspark is newer than every runtime on Maven Central), so
it imports nothing but the standard library and pyspark. It reads its job as JSON on
stdin (the catalog properties hold the database password: not on the command line):

    {"jars": [...], "catalog": "firn", "properties": {...}, "table": "ns.table",
     "versions": [snapshot ids], "base_files": [uris], "out": "/dir", "runs": 3,
     "cores": 2, "driver_memory": "2g"}

and writes ``out/current`` (``SELECT * FROM <catalog>.<table>``) and
``out/version-<id>`` (``... VERSION AS OF <id>``) as Parquet, then times the full
read into Spark's ``noop`` sink against ``spark.read.parquet`` of ``base_files``
(best of ``runs`` after one warm-up each), and prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import DataFrame, SparkSession


def session(job: dict) -> SparkSession:
    catalog = job["catalog"]
    builder = (
        SparkSession.builder.master(f"local[{job['cores']}]")
        .appName("firn-bench-iceberg-spark")
        .config("spark.jars", ",".join(job["jars"]))
        .config("spark.driver.memory", job["driver_memory"])
        .config("spark.ui.enabled", "false")
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config(f"spark.sql.catalog.{catalog}", "org.apache.iceberg.spark.SparkCatalog")
    )
    for key, value in job["properties"].items():
        builder = builder.config(f"spark.sql.catalog.{catalog}.{key}", value)
    return builder.getOrCreate()


def best_of(runs: int, df: DataFrame) -> float:
    df.write.format("noop").mode("overwrite").save()  # warm-up
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> int:
    job = json.load(sys.stdin)
    spark = session(job)
    spark.sparkContext.setLogLevel("ERROR")
    name = f"{job['catalog']}.{job['table']}"
    try:
        current = spark.sql(f"SELECT * FROM {name}")
        current.write.parquet(f"{job['out']}/current")
        for version in job["versions"]:
            older = spark.sql(f"SELECT * FROM {name} VERSION AS OF {int(version)}")
            older.write.parquet(f"{job['out']}/version-{version}")
        snapshots = [
            r.snapshot_id
            for r in spark.sql(
                f"SELECT snapshot_id FROM {name}.snapshots ORDER BY committed_at"
            ).collect()
        ]
        delete_files = spark.sql(f"SELECT count(*) FROM {name}.delete_files").collect()[0][0]
        data_files = spark.sql(f"SELECT count(*) FROM {name}.data_files").collect()[0][0]
        version_sql = f"SELECT {job['catalog']}.system.iceberg_version()"
        iceberg_version = spark.sql(version_sql).collect()[0][0]
        plain = spark.read.parquet(*job["base_files"])
        report = {
            "spark_version": spark.version,
            "iceberg_version": iceberg_version,
            "snapshots": snapshots,
            "data_files": data_files,
            "delete_files": delete_files,
            "iceberg_rows": current.count(),
            "parquet_rows": plain.count(),
            "iceberg_s": best_of(job["runs"], current),
            "parquet_s": best_of(job["runs"], plain),
        }
    finally:
        spark.stop()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
