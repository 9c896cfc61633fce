"""How Firn configures the sessions it builds: the driver address and the executors'
Python are pinned for local masters only; a cluster keeps its own unless the
settings say otherwise."""

from __future__ import annotations

import sys

import pytest

from firn.engine.spark_session import is_local, session_conf, worker_python
from firn.settings import FirnSettings


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[*]", True),
        ("local[2]", True),
        ("local[2, 3]", True),
        ("local-cluster[2, 1, 1024]", True),
        ("spark://10.0.0.5:7077", False),
        ("yarn", False),
        ("k8s://https://api:6443", False),
        ("localhost", False),
    ],
)
def test_local_masters_are_told_apart(master: str, local: bool) -> None:
    assert is_local(master) is local


def test_the_driver_address_is_pinned_for_local_masters_only() -> None:
    local = session_conf(FirnSettings(spark_master="local[2]"))
    assert local["spark.driver.host"] == "127.0.0.1"
    cluster = session_conf(FirnSettings(spark_master="spark://10.0.0.5:7077"))
    assert "spark.driver.host" not in cluster
    assert "spark.driver.bindAddress" not in cluster
    chosen = session_conf(
        FirnSettings(
            spark_master="spark://10.0.0.5:7077",
            spark_conf={"spark.driver.host": "10.0.0.9", "spark.ui.enabled": "true"},
        )
    )
    assert (chosen["spark.driver.host"], chosen["spark.ui.enabled"]) == ("10.0.0.9", "true")


def test_executors_run_this_python_locally_and_their_own_on_a_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python(FirnSettings(spark_master="local[*]")) == sys.executable
    assert worker_python(FirnSettings(spark_master="spark://h:7077")) is None
    configured = FirnSettings(
        spark_master="spark://h:7077", spark_conf={"spark.pyspark.python": "/opt/py/bin/python"}
    )
    assert worker_python(configured) == "/opt/py/bin/python"
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3.11")
    assert worker_python(FirnSettings(spark_master="spark://h:7077")) == "/usr/bin/python3.11"
    assert worker_python(FirnSettings(spark_master="local[*]")) == "/usr/bin/python3.11"
