"""Which ``format("firn")`` reads the JVM's FirnSource may take from the Python source,
decided before any catalog is reached (``firn.spark.jvm_format``); the reads it takes are
held to the model in ``tests/integration/test_spark_reader.py``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from firn.spark import jvm_format


@pytest.mark.parametrize(
    "options",
    [
        {"path": "orders", "filter": "qty > 3"},
        {"path": "orders", "pushdown": "true"},
        {"path": "orders", "start_snapshot": "3"},
        {"path": "orders", "start_snapshot": "3", "end_snapshot": "5"},
        {"path": "orders", "snapshot": "4", "splits": "merging"},
        {"path": "orders", "snapshot": "4", "splits": "python"},
        {"path": "orders", "somethingelse": "1"},
    ],
)
def test_reads_the_merge_reader_never_takes_are_left_before_planning(
    options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_catalog(*args: object, **kwargs: object) -> None:
        raise AssertionError("planned a read the merge reader cannot take")

    monkeypatch.setattr(jvm_format, "plan_read", no_catalog)
    assert jvm_format.jvm_plan(options, lambda location: True) is None


def test_the_callback_leaves_what_it_cannot_plan_to_the_python_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad option or a failed plan is the Python source's to report, in Spark's way:
    the callback answers None, never raises into the JVM."""

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no table named 'nope'")

    monkeypatch.setattr(jvm_format, "plan_read", failing)
    planner = jvm_format.ReadPlanner(None)  # type: ignore[arg-type]  # never asked
    assert planner.plan(json.dumps({"path": "nope"})) is None
    assert planner.plan(json.dumps({"path": "orders", "snapshot": "latest"})) is None
    assert planner.plan("not json") is None
    assert planner.plan(json.dumps({})) is None  # no table named


def test_a_callback_that_cannot_be_served_leaves_every_call_to_the_python_source(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With the jar, FirnSource is in front whether or not the callback works, so the
    Python source must still go behind it (``firn-python``); without a JVM (Spark
    Connect) it is ``firn`` itself."""
    import pyspark.java_gateway

    def refused(gateway: object) -> None:
        raise OSError("no callback server here")

    monkeypatch.setattr(pyspark.java_gateway, "ensure_callback_server_started", refused)
    monkeypatch.setattr(jvm_format.jvm, "loaded", lambda spark: True)
    session = SimpleNamespace(sparkContext=SimpleNamespace(_gateway=None), _jvm=None)
    assert jvm_format.install(session) is True  # type: ignore[arg-type]
    assert "cannot call back into this process" in caplog.text

    monkeypatch.setattr(jvm_format.jvm, "loaded", lambda spark: False)
    assert jvm_format.install(SimpleNamespace()) is False  # type: ignore[arg-type]
