"""A table whose warehouse is ``s3://``: commit and read through the S3 API.

The endpoint is moto's S3 server (an S3-compatible HTTP server in this process), so
this checks Firn's S3 code path (``pyarrow.fs.S3FileSystem``, URI options, dataset
scans over object keys); it is not a test of AWS itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from moto.server import ThreadedMotoServer

import firn
from firn.catalog.expiry import expire
from firn.settings import FirnSettings
from firn_localstack.processes import free_port
from tests.waiting import eventually


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "firn")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "firn-secret")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop()


def test_commit_and_read_with_an_s3_warehouse(settings: FirnSettings, s3_endpoint: str) -> None:
    options = f"region=us-east-1&scheme=http&endpoint_override={s3_endpoint}"
    fs, _ = pafs.FileSystem.from_uri(f"s3://lake?{options}&allow_bucket_creation=true")
    fs.create_dir("lake")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    with firn.connect(warehouse=f"s3://lake/firn?{options}", settings=settings) as catalog:
        table = catalog.create_table("orders", schema, ["id"], properties={"change.buckets": 2})
        assert table.location.startswith("s3://lake/firn/orders-")
        table.upsert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
        table.delete(pa.table({"id": [2]}))
        table.upsert(pa.table({"id": [3], "v": ["c2"]}))
        rows = sorted(table.read().to_pylist(), key=lambda r: r["id"])
        assert rows == [{"id": 1, "v": "a"}, {"id": 3, "v": "c2"}]
        stored = fs.get_file_info(pafs.FileSelector("lake/firn", recursive=True))
        parquet = [f.path for f in stored if f.path.endswith(".parquet")]
        assert sorted(parquet) == sorted(
            f"lake/firn/orders-{table.table_id}/{p}"
            for p in table.files().column("path").to_pylist()
        )


def test_the_orphan_sweep_lists_an_s3_warehouse(settings: FirnSettings, s3_endpoint: str) -> None:
    options = f"region=us-east-1&scheme=http&endpoint_override={s3_endpoint}"
    fs, _ = pafs.FileSystem.from_uri(f"s3://lake?{options}&allow_bucket_creation=true")
    fs.create_dir("lake")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    # moto keeps "lake" between tests: a prefix of this test's own
    with firn.connect(warehouse=f"s3://lake/sweep?{options}", settings=settings) as catalog:
        table = catalog.create_table(
            "swept", schema, ["id"], properties={"change.buckets": 2, "orphan.retention": "1s"}
        )
        table.upsert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
        live = set(table.files().column("path").to_pylist())
        stray = "base/p7-t7-a1/B-1-0-00000.parquet"  # a killed executor's
        table.storage.write_parquet(stray, pa.table({"id": [9], "v": ["z"]}))
        assert {f.path for f in table.storage.walk()} == live | {stray}

        def swept() -> bool:
            expire(catalog.conn, "swept")
            return not table.storage.exists(stray)

        eventually(swept, timeout=60, what="the sweep deleting the stray object", every=0.2)
        assert {f.path for f in table.storage.walk()} == live
        assert sorted(table.read().column("id").to_pylist()) == [1, 2, 3]


def test_s3_keys_stay_in_the_environment(settings: FirnSettings, s3_endpoint: str) -> None:
    """The keys (the fixture's AWS_SECRET_ACCESS_KEY) reach S3 but not the catalog, the
    table's status or its files' listing; a warehouse URI carrying them is refused
    before a table is made, without echoing them."""
    options = f"region=us-east-1&scheme=http&endpoint_override={s3_endpoint}"
    fs, _ = pafs.FileSystem.from_uri(f"s3://lake?{options}&allow_bucket_creation=true")
    fs.create_dir("lake")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    with firn.connect(warehouse=f"s3://lake/firn?{options}", settings=settings) as catalog:
        table = catalog.create_table("orders", schema, ["id"])
        table.upsert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
        rows = catalog.conn.execute(
            "SELECT to_jsonb(t)::text FROM catalog_table t WHERE table_id = %s",
            (table.table_id,),
        ).fetchall()
        shown = repr(rows) + repr(table.status()) + repr(table.files().to_pylist())
        assert "firn-secret" not in shown
    leaky = f"s3://lake/firn?{options}&access_key=firn&secret_key=firn-secret"
    with firn.connect(warehouse=leaky, settings=settings) as catalog:
        with pytest.raises(firn.ConfigError, match="carries credentials") as refused:
            catalog.create_table("leaky", schema, ["id"])
        assert "firn-secret" not in str(refused.value)
        assert "leaky" not in catalog.tables()
