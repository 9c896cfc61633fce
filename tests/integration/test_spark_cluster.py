"""Compaction on a real Spark standalone cluster whose workers do not have Firn.

The cluster (``spark_cluster`` in conftest) is a master and one worker started from
pyspark's own ``spark-class``; its executors run a virtualenv with pyarrow and numpy
only. Firn's code reaches them as the zip ``firn.engine.shipping`` adds to the
session. Checked here: the workers really lack Firn and pydantic; ``firn.compact``
in a caller's session keeps the merged view equal to the reference model; the
executor-dispatcher's handler runs its tasks on the cluster's master.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pyspark import SparkContext
from pyspark.sql import SparkSession

import firn
from firn.catalog.compactions import commit_plan
from firn.engine.execution import run_spark
from firn.engine.shipping import firn_zip, ship_firn
from firn.engine.spark_session import spark_session
from firn.kafka import Topics, ensure_topics, producer
from firn.settings import FirnSettings
from firn_localstack import SparkCluster
from firn_services.dispatcher.handlers import Dispatcher
from tests.changesets import KeyKind, ReferenceModel, as_change_set, as_view, table_schema
from tests.integration.test_compaction_model import Step, check_base_files, scenarios
from tests.integration.test_dispatcher_service import planned, states, task_event
from tests.integration.test_planner_service import drain

_names = itertools.count()
PROBED = ("firn", "pydantic", "psycopg", "confluent_kafka", "pyarrow", "numpy")


def on_executor(session: SparkSession) -> dict[str, Any]:
    """Which Python an executor runs, and where each of ``PROBED`` comes from there."""

    # Nested, so cloudpickle ships it by value: the workers have no `tests` package.
    def probe(_: object) -> dict[str, Any]:
        import importlib
        import sys

        found: dict[str, Any] = {"python": sys.executable}
        for name in PROBED:
            try:
                found[name] = getattr(importlib.import_module(name), "__file__", None) or "?"
            except ImportError as exc:
                found[name] = f"ImportError: {exc}"
        return found

    result: dict[str, Any] = session.sparkContext.parallelize([0], 1).map(probe).collect()[0]
    return result


@pytest.fixture(scope="module")
def cluster_settings(spark_cluster: SparkCluster) -> FirnSettings:
    # Nothing here names the driver's address or the executors' Python: as on a
    # real cluster, Spark picks the address and the workers run their own python3.
    return FirnSettings(
        spark_master=spark_cluster.master_url,
        spark_conf={"spark.executor.memory": "512m", "spark.executor.cores": "1"},
    )


@pytest.fixture(scope="module")
def cluster_session(cluster_settings: FirnSettings) -> Iterator[tuple[SparkSession, Any]]:
    """The caller's session on the cluster, and what its executors had before Firn
    shipped anything. Other tests leave a local session running; one process has one
    SparkContext, so that one stops first (the next local test builds a new one)."""
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    session = spark_session(cluster_settings, app_name="firn-cluster-test")
    before = on_executor(session)
    yield session, before
    session.stop()


def test_the_workers_have_no_firn_until_it_is_shipped(
    cluster_session: tuple[SparkSession, Any], spark_cluster: SparkCluster
) -> None:
    session, before = cluster_session
    assert session.sparkContext.master == spark_cluster.master_url
    assert before["python"] != sys.executable
    assert spark_cluster.python is not None
    assert before["python"].startswith(str(spark_cluster.python.parent.absolute()))
    for name in ("firn", "pydantic", "psycopg", "confluent_kafka"):
        assert before[name].startswith("ImportError"), (name, before[name])
    for name in ("pyarrow", "numpy"):
        assert not before[name].startswith("ImportError"), (name, before[name])

    ship_firn(session)
    after = on_executor(session)
    assert Path(firn_zip()).name in after["firn"], after["firn"]
    assert after["pydantic"].startswith("ImportError")


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_compact_in_the_callers_session_keeps_the_model(
    cluster_session: tuple[SparkSession, Any],
    settings: FirnSettings,
    tmp_path_factory: pytest.TempPathFactory,
    scenario: tuple[KeyKind, dict[str, Any], bool, list[Step]],
) -> None:
    session, _ = cluster_session
    kind, properties, partitioned, plan = scenario
    schema = table_schema(kind)
    warehouse = tmp_path_factory.mktemp("cluster-warehouse")
    with firn.connect(warehouse=str(warehouse), settings=settings) as catalog:
        table = catalog.create_table(
            f"on_cluster_{next(_names)}",
            schema,
            ["part", "k"],
            ["part"] if partitioned else [],
            properties,
        )
        model = ReferenceModel()
        for action, arg in plan:
            if action == "commit":
                table.commit(as_change_set(arg, schema))
                model.apply(arg)
            elif action == "buckets":
                table.set_properties({"change.buckets": arg[0], "base.buckets": arg[1]})
            else:
                compaction_kind, _ = arg  # every compaction runs on the cluster
                summary = firn.compact(table, kind=compaction_kind, spark=session)
                assert summary["failed_attempts"] == 0, summary["errors"]
                assert all(p["outcome"] == "committed" for p in summary["plans"]), summary
                check_base_files(table)
            assert as_view(table.read()) == model.view(), f"after {action} {arg}"


def test_the_dispatcher_runs_its_tasks_on_the_cluster_master(
    cluster_session: tuple[SparkSession, Any],
    cluster_settings: FirnSettings,
    settings: FirnSettings,
    tmp_path: Path,
    unique: str,
) -> None:
    settings = settings.model_copy(
        update={
            "spark_master": cluster_settings.spark_master,
            "spark_conf": cluster_settings.spark_conf,
        }
    )
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    # As services/dispatcher/main.py wires it: a session for FIRN_SPARK_MASTER.
    spark = spark_session(settings, app_name="firn-dispatcher")
    assert spark.sparkContext.master == settings.spark_master
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        table, record = planned(catalog, "dispatched_on_cluster")
        expected = table.read().sort_by("id")
        dispatcher = Dispatcher(
            catalog, producer(settings), topics, functools.partial(run_spark, spark), owner="test"
        )
        dispatcher.plan_task(task_event(table, record, 0))
        assert states(catalog, record) == [("Prepared", 1)] * len(record.tasks)
        results = drain(
            settings, topics.task_results, f"results-{unique}", expect=len(record.tasks)
        )
        assert {r["outcome"] for r in results} == {"prepared"}
        assert commit_plan(catalog.conn, record.plan_id).outcome == "committed"
        assert table.read().sort_by("id").equals(expected)
        assert {r["store"] for r in table.files().to_pylist()} == {"base"}
