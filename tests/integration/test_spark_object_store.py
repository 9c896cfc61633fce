"""Spark's own readers and Firn's JVM pieces on a table in S3, against the dict model.

A session with Hadoop's S3 connector (``hadoop-aws`` and the AWS SDK, fetched from
Maven Central by ``firn_localstack.s3a``) opens the table's files as ``s3a://`` paths
(``firn.spark.hadoop``): the JVM loader writes a load there, Spark's Parquet reader
reads the compacted splits, the JVM merge reader the merging ones (deletion vectors
included), and ``format("firn")`` reads through the merge reader. A session without a
file system for the table's store reads everything through the ``firn`` source. The
endpoint is moto's S3 server in this process, as in ``test_s3_warehouse.py``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from moto.server import ThreadedMotoServer
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

import firn
import firn.spark
import firn.spark.native
from firn.engine.spark_session import spark_session
from firn.settings import FirnSettings
from firn.spark import hadoop, jvm, jvm_format
from firn_localstack.processes import free_port
from firn_localstack.s3a import s3a_jars
from tests.integration.table_checks import base_entries, commit_kv

REPO = Path(__file__).resolve().parents[2]
KEYS = ("firn", "firn-secret")
SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """moto's S3 server, its bucket ``lake``; yields ``host:port``."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", KEYS[0])
        env.setenv("AWS_SECRET_ACCESS_KEY", KEYS[1])
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            endpoint = f"127.0.0.1:{port}"
            fs, _ = pafs.FileSystem.from_uri(f"s3://lake?{_options(endpoint)}")
            fs.create_dir("lake")
            yield endpoint
        finally:
            server.stop()


@pytest.fixture(scope="module")
def spark(s3: str) -> Iterator[SparkSession]:
    """A local session with Firn's jar and Hadoop's S3 connector, pointed at moto, in a
    JVM of its own: ``spark.jars`` reach the driver's class path only when its JVM
    starts, and another module's session may have started this process's."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    _new_jvm()
    connector = {
        "spark.jars": ",".join(str(j) for j in s3a_jars(REPO / ".firn" / "cache")),
        "spark.hadoop.fs.s3a.endpoint": f"http://{s3}",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": KEYS[0],
        "spark.hadoop.fs.s3a.secret.key": KEYS[1],
    }
    settings = FirnSettings(spark_master="local[2]", spark_conf=connector)
    session = spark_session(settings, app_name="firn-object-store-test")
    firn.spark.register(session)
    yield session
    session.stop()
    _new_jvm()  # the next module's sessions start without the connector


def _new_jvm() -> None:
    """Shut down this process's Spark JVM, if any: the next session starts a new one."""
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    process = getattr(gateway, "proc", None)  # the JVM pyspark started, if it did
    if process is not None:
        if process.stdin is not None:
            process.stdin.close()  # pyspark's JVM exits when its stdin closes
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _options(endpoint: str) -> str:
    return f"region=us-east-1&scheme=http&endpoint_override={endpoint}&allow_bucket_creation=true"


def _connection(settings: FirnSettings) -> dict[str, str]:
    assert settings.database_url is not None
    return {
        "database_url": settings.database_url.get_secret_value(),
        "database_schema": settings.database_schema,
    }


def _rows(df: DataFrame) -> dict[Any, Any]:
    return {r["k"]: r["v"] for r in df.toArrow().to_pylist()}


def test_a_table_in_s3_is_loaded_and_read_by_the_jvm_and_sparks_own_reader(
    spark: SparkSession, s3: str, settings: FirnSettings, unique: str
) -> None:
    options = _connection(settings)
    warehouse = f"s3://lake/spark-{unique}?{_options(s3)}"
    with firn.connect(warehouse=warehouse, settings=settings) as catalog:
        # Small files keep their deletion vectors, so the fold below leaves some to read.
        properties = {"base.buckets": 2, "deletion-vectors.min-file-bytes": "1KiB"}
        table = catalog.create_table("orders", SCHEMA, ["k"], properties=properties)
        assert hadoop.reaches(spark, table.location)

        model = {k: f"v{k}" for k in range(3000)}
        loaded = spark.createDataFrame([(k, v) for k, v in model.items()], "k long, v string")
        loaded.write.format("firn").mode("overwrite").options(**options).save("orders")
        table.refresh()
        paths = table.files().column("path").to_pylist()
        assert paths
        assert all(re.search(r"/p\d{5}-a\d+-", p) for p in paths), (
            f"the JVM loader's task directories, not the firn source's: {paths}"
        )

        # Just loaded: nothing to merge, every split Spark's own Parquet reader's.
        plan = firn.spark.native.plan_read("orders", **options)
        assert plan.native
        assert not plan.merging
        assert _rows(firn.spark.read(spark, "orders", **options)) == model

        commit_kv(table, model, {k: f"w{k}" for k in range(0, 3000, 7)}, list(range(1, 3000, 11)))
        commit_kv(table, model, {k: f"x{k}" for k in range(2990, 3100)}, [5, 6, 2991])
        plan = firn.spark.native.plan_read("orders", **options)
        assert plan.merging
        assert all(jvm.jvm_mergeable(s, plan.schema_id) for s in plan.merging)
        assert _rows(firn.spark.read(spark, "orders", **options)) == model
        through_jvm = jvm_format.jvm_plan({"path": "orders", **options}, lambda _: True)
        assert through_jvm is not None, "format('firn') is the merge reader's"
        assert _rows(spark.read.format("firn").options(**options).load("orders")) == model

        firn.compact(table, engine="local")
        table.refresh()
        assert any(e.deletion_vector is not None for e in base_entries(table)), (
            "a fold that keeps base files and hides the replaced rows"
        )
        assert _rows(firn.spark.read(spark, "orders", **options)) == model
        assert _rows(spark.read.format("firn").options(**options).load("orders")) == model


def test_a_session_without_the_stores_file_system_reads_through_the_firn_source(
    spark: SparkSession,
    s3: str,
    settings: FirnSettings,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # This session has no GCS connector: asked for real.
    assert not hadoop.reaches(spark, "gs://lake/t")
    options = _connection(settings)
    with firn.connect(
        warehouse=f"s3://lake/python-{unique}?{_options(s3)}", settings=settings
    ) as catalog:
        table = catalog.create_table("orders", SCHEMA, ["k"])
        model: dict[Any, Any] = {}
        commit_kv(table, model, {k: f"v{k}" for k in range(500)}, [])
        firn.compact(table, engine="local")
        commit_kv(table, model, {k: f"w{k}" for k in range(0, 600, 3)}, [1, 2])
        # As a session without hadoop-aws answers for s3a.
        monkeypatch.setattr(hadoop, "_has_file_system", lambda session, scheme: False)
        monkeypatch.setattr(hadoop, "_reached", {})
        assert not hadoop.reaches(spark, table.location)
        read = firn.spark.read(spark, "orders", **options)
        assert "firn-merge" not in read._jdf.queryExecution().toString()
        assert _rows(read) == model
        assert _rows(spark.read.format("firn").options(**options).load("orders")) == model
        overwrite = spark.createDataFrame([(7, "only")], "k long, v string")
        overwrite.write.format("firn").mode("overwrite").options(**options).save("orders")
        assert _rows(spark.read.format("firn").options(**options).load("orders")) == {7: "only"}
