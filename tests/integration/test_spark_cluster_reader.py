"""``spark.read.format("firn")`` on a real Spark standalone cluster whose workers do
not have Firn (``spark_cluster`` in conftest: executors run a virtualenv with
pyarrow and numpy only).

Spark plans a Python data source in a Python worker on the driver's machine, with
the session's Python (``python3`` on the driver's PATH, as no ``PYSPARK_PYTHON`` is
set for a cluster); executors start ``python3`` on theirs. So the reads run in a
child process whose PATH puts this virtualenv (which has Firn) first, as a driver
machine with Firn installed would, and whose JVM is its own (one SparkContext per
process, and the JVM's PATH is fixed when it starts). The child reads the merged
view, a filtered view, an older snapshot and the changes; this test compares them
with the reference model and ``Table.changes``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import firn
from firn.settings import FirnSettings
from firn_localstack import SparkCluster
from tests.changesets import KEY_KINDS, ReferenceModel, as_change_set, as_view, table_schema
from tests.hash_tree import HASH_TREE

CHILD = textwrap.dedent(
    """
    import json, sys
    import firn.spark
    from firn.engine.spark_session import spark_session
    from firn.settings import FirnSettings

    master, options, name, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    spark = spark_session(
        FirnSettings(
            spark_master=master,
            spark_conf={"spark.executor.memory": "512m", "spark.executor.cores": "1"},
        ),
        app_name="firn-cluster-reader",
    )
    firn.spark.register(spark)

    def probe(_):
        import importlib, sys
        found = {"python": sys.executable}
        for module in ("firn", "pydantic", "psycopg"):
            try:
                found[module] = importlib.import_module(module).__file__
            except ImportError as exc:
                found[module] = f"ImportError: {exc}"
        return found

    def read(**extra):
        return spark.read.format("firn").options(**options, **extra).load(name)

    reads = {
        "whole": read(),
        "filtered": read(filter="part = 'a' and qty > 0"),
        "pushed": read(pushdown="true").where("part = 'b' and k in (1, 2, 3)"),
        "snapshot": read(snapshot=options["older"]),
        "changes": read(start_snapshot=options["older"]),
    }
    report = {
        "master": spark.sparkContext.master,
        "executor": spark.sparkContext.parallelize([0], 1).map(probe).collect()[0],
        "partitions": {k: df.rdd.getNumPartitions() for k, df in reads.items()},
    }
    import pyarrow.parquet as pq
    for key, df in reads.items():
        pq.write_table(df.toArrow(), f"{out}/{key}.parquet")
    spark.stop()
    print(json.dumps(report))
    """
)


def test_a_cluster_without_firn_reads_a_table(
    spark_cluster: SparkCluster, settings: FirnSettings, tmp_path: Path
) -> None:
    kind = KEY_KINDS[0]
    schema = table_schema(kind)
    model = ReferenceModel()
    with firn.connect(warehouse=str(tmp_path / "warehouse"), settings=settings) as catalog:
        table = catalog.create_table(
            "read_on_cluster", schema, ["part", "k"], ["part"], {"base.buckets": 2, **HASH_TREE}
        )

        def commit(ops: list[dict[str, Any]]) -> None:
            table.commit(as_change_set(ops, schema))
            model.apply(ops)

        def row(part: str, k: int, op: str, qty: int | None = None) -> dict[str, Any]:
            return {
                "part": part,
                "k": k,
                "qty": qty,
                "label": f"{part}{k}",
                "price": None,
                "_op": op,
            }

        commit([row(p, k, "U", k) for p in "abc" for k in range(12)])
        firn.compact(table, engine="local")
        older = table.current_snapshot()
        older_view = model.view()
        # Same commit: delete then insert one key, insert then delete another.
        commit([row("a", 1, "D"), row("a", 1, "U", 100), row("b", 2, "U", 7), row("b", 2, "D")])
        commit([row("c", 5, "U", -3), row("a", 20, "U", 20)])

        options = {
            "database_url": settings.database_url.get_secret_value(),  # type: ignore[union-attr]
            "database_schema": settings.database_schema,
            "older": str(older),
            "partition_rows": "1",  # one split a task: the tasks count the splits
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                spark_cluster.master_url,
                json.dumps(options),
                table.name,
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-5000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])

        assert report["master"] == spark_cluster.master_url
        executor = report["executor"]
        assert executor["python"] != sys.executable
        assert ".zip" in executor["firn"], executor  # Firn's code came shipped
        assert executor["pydantic"].startswith("ImportError"), executor
        assert executor["psycopg"].startswith("ImportError"), executor

        def got(key: str) -> pa.Table:
            return pq.read_table(tmp_path / f"{key}.parquet")

        view = model.view()
        assert as_view(got("whole")) == view
        assert report["partitions"]["whole"] == len(table.scan().splits()) == 6
        assert as_view(got("filtered")) == {
            k: r for k, r in view.items() if r["part"] == "a" and (r["qty"] or 0) > 0
        }
        assert report["partitions"]["filtered"] == 2
        assert as_view(got("pushed")) == {
            k: r for k, r in view.items() if k in {("b", 1), ("b", 2), ("b", 3)}
        }
        assert report["partitions"]["pushed"] < report["partitions"]["whole"]
        assert as_view(got("snapshot")) == older_view
        changes = got("changes").sort_by([("_seq", "ascending"), ("_ord", "ascending")])
        assert changes.to_pylist() == table.changes(older).to_arrow().to_pylist()
        assert changes.num_rows == 6
