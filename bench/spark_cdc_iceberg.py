"""The Iceberg side of ``bench/spark_cdc.py``: the same CDC workload through Iceberg's
own Spark connector, no Firn code (standard library, pyspark and the workload module).

It runs in a Python whose pyspark Iceberg's runtime supports (``.firn/spark-4.1``; see
``bench/iceberg_spark.py``), reads its job as JSON on stdin:

    {"jars": [...], "warehouse": "/dir", "rows": N, "commits": C, "changes": K,
     "runs": R, "cores": 2, "driver_memory": "4g", "key": "int", "warm_gib": 4.0,
     "spark_conf": {...}}

(``spark_conf``, optional: more session settings, e.g. Hadoop's S3 connector's for a
warehouse on ``s3a://``; ``warm_gib``, optional: GiB of memory touched before each
load and the compaction, outside the clock.)

and prints one JSON object: each stage's seconds and the table's summary before and
after compaction. The table is format version 3 with merge-on-read deletes, updates
and merges (changes are deletion vectors, Iceberg's fastest write path for CDC);
changes arrive by ``MERGE INTO``; compaction is ``rewrite_data_files`` with
``rewrite-all`` (every data file rewritten, every delete applied).
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from spark_cdc_workload import (
    PRUNED,
    VALUES,
    WARM_UP_ROWS,
    base,
    changes,
    columns,
    lookup,
    read_time,
    read_times,
    report,
    summary,
    timed,
)

TABLE = "ice.db.orders"
FIRST_LOAD = "ice.db.orders_first_load"
"""Where Iceberg's first load goes, set against Firn's first (``format("firn")``)."""
UNORDERED_LOAD = "ice.db.orders_unordered_load"
"""Where the load of the rows with their ids permuted goes (``load_unordered``)."""


def session(job: dict) -> SparkSession:
    builder = SparkSession.builder
    for key, value in job.get("spark_conf", {}).items():
        builder = builder.config(key, value)
    return (
        builder.master(f"local[{job['cores']}]")
        .appName("firn-bench-spark-cdc-iceberg")
        .config("spark.jars", ",".join(job["jars"]))
        .config("spark.driver.memory", job["driver_memory"])
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.ice.type", "hadoop")
        .config("spark.sql.catalog.ice.warehouse", job["warehouse"])
        .getOrCreate()
    )


def main() -> int:
    job = json.load(sys.stdin)
    spark = session(job)
    spark.sparkContext.setLogLevel("ERROR")
    rows = job["rows"]
    key_kind = str(job.get("key", "int"))
    key = lookup(key_kind)
    try:
        for name in (TABLE, FIRST_LOAD, UNORDERED_LOAD):
            spark.sql(
                f"CREATE TABLE {name} ({columns(key_kind)}) USING iceberg TBLPROPERTIES ("
                "'format-version'='3', 'write.delete.mode'='merge-on-read', "
                "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"
            )
        out: dict[str, object] = {"spark_version": spark.version}
        warm_up = f"{TABLE}_warm_up"
        out["warm_up_s"] = timed(
            lambda: (
                base(spark, WARM_UP_ROWS, key_kind).writeTo(warm_up).using("iceberg").create(),
                spark.table(warm_up).count(),
            )
        )
        # Two loads of the whole base, as Firn's side makes (format("firn"), then
        # firn.spark.write): the session's first big write is slower than any later one
        # on either side, so each of Firn's loads is set against Iceberg's of the same
        # place in the session.
        warm_gib = float(job.get("warm_gib", 0.0))
        out["load_first_s"] = timed(
            lambda: base(spark, rows, key_kind).writeTo(FIRST_LOAD).append(), warm_gib
        )
        out["load_s"] = timed(lambda: base(spark, rows, key_kind).writeTo(TABLE).append(), warm_gib)
        spark.sql(f"DROP TABLE {FIRST_LOAD} PURGE")
        # The same rows in an order Spark does not know, into a table of their own.
        out["load_unordered_s"] = timed(
            lambda: base(spark, rows, key_kind, ordered=False).writeTo(UNORDERED_LOAD).append(),
            warm_gib,
        )
        spark.sql(f"DROP TABLE {UNORDERED_LOAD} PURGE")
        updates = ", ".join(f"t.{c} = s.{c}" for c in VALUES)
        names = ", ".join(["id", *VALUES])
        merge = (
            f"MERGE INTO {TABLE} t USING changes s ON t.id = s.id "
            "WHEN MATCHED AND s._op = 'D' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED AND s._op = 'U' THEN INSERT ({names}) "
            f"VALUES ({', '.join(f's.{c}' for c in ['id', *VALUES])})"
        )
        commit_s = 0.0
        for c in range(job["commits"]):
            changes(
                spark, rows, c, job["changes"] // job["commits"], key_kind
            ).createOrReplaceTempView("changes")
            commit_s += timed(lambda: spark.sql(merge).collect())
        out["commit_s"] = commit_s
        out["before"] = summary(spark.table(TABLE))
        out["read_before_first_s"], out["read_before_s"] = read_times(
            lambda: spark.table(TABLE), job["runs"]
        )
        out["read_pruned_before_s"] = read_time(
            lambda: spark.table(TABLE).select(*PRUNED), job["runs"]
        )
        out["read_key_before_s"] = read_time(lambda: spark.table(TABLE).where(key), job["runs"])
        out["files_before"] = spark.sql(f"SELECT count(*) FROM {TABLE}.data_files").collect()[0][0]
        out["deletes_before"] = spark.sql(f"SELECT count(*) FROM {TABLE}.delete_files").collect()[
            0
        ][0]
        rewrite = (
            "CALL ice.system.rewrite_data_files(table => 'db.orders', "
            "options => map('rewrite-all', 'true'))"
        )
        out["compact_s"] = timed(lambda: spark.sql(rewrite).collect(), warm_gib)
        out["after"] = summary(spark.table(TABLE))
        out["read_after_first_s"], out["read_after_s"] = read_times(
            lambda: spark.table(TABLE), job["runs"]
        )
        out["read_pruned_after_s"] = read_time(
            lambda: spark.table(TABLE).select(*PRUNED), job["runs"]
        )
        out["read_key_after_s"] = read_time(lambda: spark.table(TABLE).where(key), job["runs"])
        out["files_after"] = spark.sql(f"SELECT count(*) FROM {TABLE}.data_files").collect()[0][0]
        out["iceberg_version"] = spark.sql("SELECT ice.system.iceberg_version()").collect()[0][0]
    finally:
        spark.stop()
    report(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
