"""The Spark writer on a real standalone cluster whose workers do not have Firn
(``spark_cluster`` in conftest): an append and an overwrite read as the model.

Spark runs a Python data source's driver-side steps (``writer()``, ``commit``) in
Python workers it starts on the driver's machine with the session's Python
executable name (``PYSPARK_PYTHON``, default ``python3``), the same name the
executors resolve on their own machines. So, as in a real deployment, ``python3`` on
the driver's PATH is an interpreter with Firn installed (this virtualenv: conftest
puts it first), while the workers' ``python3`` has only pyarrow and numpy."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import firn
import firn.spark
from firn.settings import FirnSettings
from tests.changesets import ReferenceModel, as_view
from tests.integration.test_spark_cluster import cluster_session, cluster_settings

__all__ = ["cluster_session", "cluster_settings"]  # fixtures, used by name
_names = itertools.count()
SCHEMA = pa.schema(
    [
        pa.field("part", pa.string(), nullable=False),
        pa.field("k", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
    ]
)


@pytest.fixture(scope="module")
def session(cluster_session: tuple[SparkSession, Any]) -> SparkSession:
    session, before = cluster_session
    assert before["firn"].startswith("ImportError"), "the workers have no Firn of their own"
    return session


def test_append_and_overwrite_from_a_cluster_read_as_the_model(
    session: SparkSession, settings: FirnSettings, tmp_path: Path
) -> None:
    firn.spark.register(session)
    assert settings.database_url is not None
    options = {
        "database_url": settings.database_url.get_secret_value(),
        "database_schema": settings.database_schema,
        "warehouse": str(tmp_path / "wh"),
        "kafka_bootstrap": settings.kafka_bootstrap or "",
        "topic_prefix": settings.topic_prefix,
    }
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog:
        table = catalog.create_table(f"cluster_{next(_names)}", SCHEMA, ["part", "k"], ["part"])
        ops = [
            {"part": p, "k": k, "qty": k, "_op": "U", "ts": k} for p in "ab" for k in range(40)
        ] + [{"part": "a", "k": 3, "qty": None, "_op": "D", "ts": 100}]
        df = session.createDataFrame(
            [tuple(o.values()) for o in ops], "part string, k long, qty long, _op string, ts long"
        ).repartition(3)
        df.write.format("firn").options(**options).option("order_by", "ts").mode("append").save(
            table.name
        )
        model = ReferenceModel()
        model.apply([{c: v for c, v in o.items() if c != "ts"} for o in ops])
        assert as_view(table.read()) == model.view()
        assert table.current_snapshot() == 1
        rows = [(p, k, -k) for p in "bc" for k in range(30)]
        session.createDataFrame(rows, "part string, k long, qty long").repartition(2).write.format(
            "firn"
        ).options(**options).option("partitionOverwriteMode", "dynamic").mode("overwrite").save(
            table.name
        )
        expected = {key: row for key, row in model.view().items() if key[0] == "a"}
        expected.update({(p, k): {"part": p, "k": k, "qty": q} for p, k, q in rows})
        assert as_view(table.read()) == expected
        assert table.current_snapshot() == 2
