"""The Spark cluster runner's failure paths and its cached worker virtualenv (the
cluster itself runs in tests/integration/test_spark_cluster.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from firn.errors import StackError
from firn_localstack import SparkCluster, spark_cluster, worker_venv
from firn_localstack.spark_cluster import worker_venv_dir


def test_a_master_that_cannot_start_is_a_stack_error_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    cluster = SparkCluster(tmp_path / "spark")
    with pytest.raises(StackError, match="Spark master exited") as raised:
        cluster.start()
    assert "no-jdk" in str(raised.value), "the log's last lines say why"
    assert cluster.pids == [], "nothing left running"


def test_no_java_at_all_is_a_stack_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StackError, match="Java 17"):
        SparkCluster(tmp_path / "spark").start()


def test_the_worker_venv_is_built_once_and_a_failed_build_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(argv: list[str], **kwargs: object) -> str:
        raise StackError(f"{argv[1:3]} failed")

    monkeypatch.setattr(spark_cluster, "run", failing)
    with pytest.raises(StackError, match="venv"):
        worker_venv(tmp_path)
    assert list(tmp_path.iterdir()) == [], "no half-made virtualenv is left"

    venv = worker_venv_dir(tmp_path)
    (venv / "bin").mkdir(parents=True)
    (venv / ".complete").write_text("{}")
    assert worker_venv(tmp_path) == venv / "bin" / "python", "reused: nothing is run"
    assert venv.name.startswith(f"spark-worker-py{sys.version_info.major}.")
    assert ("pyarrow" in venv.name, "numpy" in venv.name) == (True, True)
