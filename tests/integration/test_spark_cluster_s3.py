"""A table on an S3 warehouse, compacted and read by a real Spark standalone cluster
whose workers do not have Firn: commit, compact, read, expire, orphan sweep.

S3 is moto's S3 server on loopback (one per module) made to check signatures: it
accepts one IAM key pair and refuses others. The cluster is ``spark_cluster`` in
conftest (executors run a virtualenv with pyarrow and numpy only). Executors read
and write the warehouse themselves, so they get the key pair the way a user's
cluster would: ``spark.executorEnv.AWS_*`` in the session's conf (``FIRN_SPARK_CONF``);
without it their reads and compactions fail. The session's JVM starts before this
process has the key pair, so it never does: Spark plans ``format("firn")`` reads in
Python workers it starts on the driver's machine, and those reach only the catalog
(PySpark starts them with the ``spark.executorEnv`` variables anyway).
"""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto.server import ThreadedMotoServer
from pyspark import SparkContext
from pyspark.sql import SparkSession

import firn
import firn.spark
from firn.catalog.expiry import expire
from firn.engine.spark_session import spark_session
from firn.errors import SnapshotExpiredError
from firn.settings import FirnSettings
from firn_localstack import SparkCluster
from firn_localstack.processes import free_port
from tests.changesets import (
    KEY_KINDS,
    ReferenceModel,
    Row,
    as_change_set,
    as_view,
    operations,
    table_schema,
)
from tests.integration.table_checks import check_base_files, live_paths
from tests.waiting import eventually

KIND = KEY_KINDS[0]  # int64: Spark's rows come back as the same Python values
SCHEMA = table_schema(KIND)
_names = itertools.count()


@dataclass(frozen=True)
class MotoS3:
    """A moto S3 server that checks signatures, and the one key pair it accepts."""

    endpoint: str
    credentials: dict[str, str]

    @property
    def options(self) -> str:
        return f"region=us-east-1&scheme=http&endpoint_override={self.endpoint}"


def _allow_one_user(endpoint: str) -> dict[str, str]:
    """Create an IAM user allowed everything on S3 and return its key pair; from then
    on moto rejects any request that is unsigned or signed with another key."""
    iam = boto3.client(
        "iam",
        region_name="us-east-1",
        endpoint_url=f"http://{endpoint}",
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
    )
    iam.create_user(UserName="firn")
    iam.put_user_policy(
        UserName="firn",
        PolicyName="s3",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
            }
        ),
    )
    key = iam.create_access_key(UserName="firn")["AccessKey"]
    return {
        "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
    }


def anonymous(endpoint: str, **options: Any) -> pafs.S3FileSystem:
    """The moto server through unsigned requests."""
    return pafs.S3FileSystem(
        anonymous=True, region="us-east-1", scheme="http", endpoint_override=endpoint, **options
    )


def _moto_auth(endpoint: str, unchecked_requests: str) -> None:
    """Moto checks signatures after this many more requests (``inf``: never, its
    default; the setting is global to this process, so it is put back after)."""
    request = urllib.request.Request(
        f"http://{endpoint}/moto-api/reset-auth",
        data=unchecked_requests.encode(),
        headers={"Content-Type": "text/plain"},  # not a form: moto reads the raw body
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"127.0.0.1:{port}"
    try:
        s3 = MotoS3(endpoint, _allow_one_user(endpoint))
        anonymous(endpoint, allow_bucket_creation=True).create_dir("lake")
        _moto_auth(endpoint, "0")
        try:
            yield s3
        finally:
            _moto_auth(endpoint, "inf")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def session(spark_cluster: SparkCluster, s3: MotoS3) -> Iterator[SparkSession]:
    """A caller's session on the cluster whose conf carries the S3 credentials for
    the executors; built before this process has them, so its JVM never does."""
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    conf = {"spark.executor.memory": "512m", "spark.executor.cores": "1"}
    conf.update({f"spark.executorEnv.{k}": v for k, v in s3.credentials.items()})
    session = spark_session(
        FirnSettings(spark_master=spark_cluster.master_url, spark_conf=conf),
        app_name="firn-cluster-s3",
    )
    firn.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def warehouse(session: SparkSession, s3: MotoS3) -> Iterator[str]:
    """The S3 warehouse URI; this process gets the credentials (for the catalog's own
    reads and writes) only now, after the session's JVM started without them."""
    jvm_env = session._jvm.System.getenv  # type: ignore[union-attr]
    assert all(jvm_env(k) != v for k, v in s3.credentials.items()), "the JVM has them"
    stranger = pafs.S3FileSystem(
        access_key="AKIDSTRANGER",
        secret_key="stranger",
        region="us-east-1",
        scheme="http",
        endpoint_override=s3.endpoint,
    )
    with pytest.raises(OSError, match=r"(?i)access key|denied|forbidden"):
        stranger.get_file_info(pafs.FileSelector("lake", recursive=True))
    patch = pytest.MonkeyPatch()
    for key, value in s3.credentials.items():
        patch.setenv(key, value)
    try:
        yield f"s3://lake/prefix?{s3.options}"
    finally:
        patch.undo()


def row(part: str, k: int, op: str, qty: int | None = None) -> Row:
    return {"part": part, "k": KIND.value(k), "qty": qty, "label": None, "price": None, "_op": op}


@settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=st.lists(operations(KIND), min_size=2, max_size=4),
    later=st.lists(operations(KIND), min_size=1, max_size=3),
)
def test_commit_compact_read_expire_and_sweep_on_s3_with_a_cluster(
    session: SparkSession,
    warehouse: str,
    settings: FirnSettings,
    first: list[list[Row]],
    later: list[list[Row]],
) -> None:
    assert settings.database_url is not None
    options = {
        "database_url": settings.database_url.get_secret_value(),
        "database_schema": settings.database_schema,
    }
    with firn.connect(warehouse=warehouse, settings=settings) as catalog:
        name = f"s3_cluster_{next(_names)}"
        table = catalog.create_table(
            name,
            SCHEMA,
            ["part", "k"],
            ["part"],
            {
                "change.buckets": 2,
                "base.buckets": 2,
                "target-file-size": "2KiB",
                "snapshot.retention": "1s",
                "orphan.retention": "1s",
            },
        )
        assert table.location.startswith("s3://lake/prefix/")
        model = ReferenceModel()

        def spark_read(**extra: str) -> dict[Any, Row]:
            df = session.read.format("firn").options(**options, **extra).load(name)
            return as_view(df.toArrow())

        def commit(ops: list[Row]) -> None:
            table.commit(as_change_set(ops, SCHEMA))
            model.apply(ops)
            assert as_view(table.read()) == model.view()

        def compact(kind: str) -> None:
            summary = firn.compact(table, kind=kind, spark=session)
            assert summary["failed_attempts"] == 0, summary["errors"]
            assert summary["plans"], summary
            assert all(p["outcome"] == "committed" for p in summary["plans"]), summary
            check_base_files(table)

        # Same commit: delete then insert one key, insert then delete another.
        commit([row("a", 1, "U", 1), row("b", 2, "U", 2), row("c", 3, "U", 3)])
        commit([row("a", 1, "D"), row("a", 1, "U", 100), row("b", 2, "U", 7), row("b", 2, "D")])
        for ops in first:
            commit(ops)
        before_compaction = table.current_snapshot()
        assert spark_read() == model.view()  # change files only

        compact("major")
        assert {r["store"] for r in table.files().to_pylist()} == {"base"}
        assert as_view(table.read()) == model.view()
        assert spark_read() == model.view()

        for ops in later:
            commit(ops)
        assert spark_read() == model.view()  # base plus unmerged changes
        assert spark_read(filter="part = 'a'") == {
            k: r for k, r in model.view().items() if r["part"] == "a"
        }
        compact("major")
        assert as_view(table.read()) == model.view()

        # Retention: the pre-compaction files expire; a killed executor's output is
        # swept from the bucket. Retentions are 1 s, so poll until both are gone.
        live = live_paths(table)
        stray = "base/p9-t9-a1/B-1-0-00000.parquet"
        table.storage.write_parquet(stray, as_change_set([row("a", 9, "U")], SCHEMA))
        assert live | {stray} < {f.path for f in table.storage.walk()}

        def only_live() -> bool:
            if {f.path for f in table.storage.walk()} == live:
                return True
            expire(catalog.conn, name)
            return False

        eventually(only_live, timeout=60, what="expiry removing files not listed", every=0.3)
        assert live_paths(table) == live
        with pytest.raises(SnapshotExpiredError):
            table.read(snapshot=before_compaction)
        assert as_view(table.read()) == model.view()
        assert spark_read() == model.view()
