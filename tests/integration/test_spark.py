"""A tiny PySpark job on the SparkSession Firn builds (local mode by default)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from firn.engine.shipping import ship_firn
from firn.engine.spark_session import spark_session
from firn.settings import FirnSettings


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # Other tests' compactions may have started the default session; this module
    # checks that the configured master is honoured, so it starts its own.
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    session = spark_session(FirnSettings(spark_master="local[2]"), app_name="firn-test")
    yield session
    session.stop()


def test_last_writer_wins_dedup_runs_on_spark(spark: SparkSession) -> None:
    # (key, seq, ord, op, value): the greatest (seq, ord) per key decides.
    changes = spark.createDataFrame(
        [
            (1, 1, 0, "U", "a"),
            (1, 2, 0, "U", "b"),
            (2, 1, 0, "U", "c"),
            (2, 1, 1, "D", None),
            (3, 3, 0, "D", None),
            (3, 3, 1, "U", "d"),
        ],
        "key long, seq long, ord long, op string, value string",
    )
    latest = Window.partitionBy("key").orderBy(F.desc("seq"), F.desc("ord"))
    merged = (
        changes.withColumn("rank", F.row_number().over(latest))
        .where((F.col("rank") == 1) & (F.col("op") == "U"))
        .select("key", "value")
        .orderBy("key")
        .collect()
    )
    assert [(r.key, r.value) for r in merged] == [(1, "b"), (3, "d")]
    assert spark.sparkContext.master == "local[2]"


def test_arrow_batches_run_in_python_workers_that_have_firn(spark: SparkSession) -> None:
    # mapInArrow is how the merge kernel will run: Arrow batches in, Arrow batches out.
    def tag(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import sys

        import firn

        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {
                    "id": batch.column("id"),
                    "version": [firn.__version__] * batch.num_rows,
                    "python": [sys.executable] * batch.num_rows,
                }
            )

    rows = (
        spark.range(100, numPartitions=2)
        .mapInArrow(tag, "id long, version string, python string")
        .collect()
    )
    import sys

    import firn

    assert sorted(r.id for r in rows) == list(range(100))
    assert {(r.version, r.python) for r in rows} == {(firn.__version__, sys.executable)}


def test_shipping_firn_leaves_the_driver_on_the_installed_package(spark: SparkSession) -> None:
    # addPyFile puts the zip on the driver's own path too; modules imported after it
    # (and child processes, which inherit the path) must not come from the zip.
    shipped = ship_firn(spark)
    assert [p for p in sys.path if Path(p).name == shipped.name] == []
    probe = subprocess.run(
        [sys.executable, "-c", "import firn.events.schemas as s; print(s.__file__)"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert ".zip" not in probe.stdout
