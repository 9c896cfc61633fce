"""The README's Spark example runs as written: a session started after the FIRN_
variables are set (the driver's Python workers inherit them), writing to a real
catalog."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import firn
from firn.settings import FirnSettings

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def fresh_spark_env(
    settings: FirnSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    monkeypatch.setenv("FIRN_DATABASE_URL", settings.database_dsn())
    monkeypatch.setenv("FIRN_DATABASE_SCHEMA", settings.database_schema)
    monkeypatch.setenv("FIRN_KAFKA_BOOTSTRAP", settings.kafka_servers())
    monkeypatch.setenv("FIRN_TOPIC_PREFIX", settings.topic_prefix)
    monkeypatch.setenv("FIRN_WAREHOUSE", str(tmp_path))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    yield
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def test_the_readme_spark_example_runs(fresh_spark_env: None) -> None:
    section = README.read_text().split("## Tables from Spark", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the README lost its Spark example"
    schema = pa.schema(
        [
            pa.field("region", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("amount", pa.float64()),
        ]
    )
    with firn.connect() as catalog:
        orders = catalog.create_table("orders", schema, ["region", "id"], ["region"])
        orders.upsert(pa.table({"region": ["eu", "eu"], "id": [1, 2], "amount": [9.5, 3.0]}))
        exec(compile(match[1], str(README), "exec"), {})
        rows = sorted((r["region"], r["id"], r["amount"]) for r in orders.read().to_pylist())
        assert rows == [
            ("eu", 1, 9.5),
            ("eu", 7, 1.5),
            ("eu", 8, 2.5),
            *(("us", n, float(n)) for n in range(100)),
        ]
        assert orders.current_snapshot() == 3, "upsert, one change set, one load"
