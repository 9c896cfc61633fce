"""``df.write.format("firn")`` and ``df.writeStream.format("firn")`` on a real local
Spark: one change set per job (or per micro-batch, once), loads by overwrite,
nothing left behind by a failed or refused write."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

import firn
import firn.spark
from firn.catalog.files import files_at
from firn.engine.spark_session import spark_session
from firn.model.keyhash import hash_keys, node_index
from firn.model.schema import TableSchema
from firn.settings import FirnSettings
from firn.spark import jvm_format
from firn.spark.clustering import FUNCTION, FUNCTION_CLASS, key_lanes
from tests.changesets import KEY_KINDS, ReferenceModel, as_view, operations, table_schema
from tests.integration.table_checks import catalog_conn, commit_kv

_names = itertools.count()
SCHEMA = pa.schema(
    [
        pa.field("part", pa.string(), nullable=False),
        pa.field("k", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("label", pa.string()),
    ]
)
SPARK_SCHEMA = "part string, k long, qty long, label string"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    session = spark_session(FirnSettings(spark_master="local[1]"), app_name="firn-writer-test")
    firn.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog:
        yield catalog


@pytest.fixture
def options(settings: FirnSettings, catalog: firn.Catalog) -> dict[str, str]:
    """Where the data source finds this test's catalog (its own schema)."""
    assert settings.database_url is not None
    return {
        "database_url": settings.database_url.get_secret_value(),
        "database_schema": settings.database_schema,
        "warehouse": catalog.settings.warehouse,
        "kafka_bootstrap": settings.kafka_bootstrap or "",
        "topic_prefix": settings.topic_prefix,
    }


def new_table(catalog: firn.Catalog, **props: Any) -> firn.Table:
    properties = {"change.buckets": 2, "base.buckets": 2, **props}
    return catalog.create_table(
        f"spark_{next(_names)}", SCHEMA, ["part", "k"], ["part"], properties
    )


def frame(
    spark: SparkSession, rows: list[dict[str, Any]], schema: str, parts: int = 3
) -> DataFrame:
    return spark.createDataFrame([tuple(r.values()) for r in rows], schema).repartition(parts)


def stored(table: firn.Table) -> set[str]:
    return {f.path for f in table.storage.walk()}


def recorded(table: firn.Table) -> set[str]:
    found = table.catalog.conn.execute(  # type: ignore[attr-defined]
        "SELECT path FROM orphan_file WHERE table_id = %s", (table.table_id,)
    ).fetchall()
    return {p for (p,) in found}


def model_of(ops: list[dict[str, Any]]) -> ReferenceModel:
    model = ReferenceModel()
    model.apply(ops)
    return model


def view_of(table: firn.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    return as_view(table.read())


def test_an_append_is_one_change_set_equal_to_the_model(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    table.upsert(pa.table({"part": ["a", "b"], "k": [1, 2], "qty": [1, 2], "label": ["x", "y"]}))
    # Same-commit order by order_by: key (a, 1) is deleted then inserted again,
    # (b, 2) inserted then deleted, (c, 3) updated twice.
    ops = [
        {"part": "a", "k": 1, "qty": None, "label": None, "_op": "D", "ts": 1},
        {"part": "a", "k": 1, "qty": 10, "label": "again", "_op": "U", "ts": 2},
        {"part": "b", "k": 2, "qty": 20, "label": "new", "_op": "U", "ts": 3},
        {"part": "b", "k": 2, "qty": None, "label": None, "_op": "D", "ts": 4},
        {"part": "c", "k": 3, "qty": 30, "label": "first", "_op": "U", "ts": 5},
        {"part": "c", "k": 3, "qty": 31, "label": "last", "_op": "U", "ts": 6},
        *(
            {"part": p, "k": k, "qty": k, "label": f"v{k}", "_op": "U", "ts": 100 + k}
            for p in "abc"
            for k in range(10, 40)
        ),
    ]
    before = table.current_snapshot()
    df = frame(spark, ops, f"{SPARK_SCHEMA}, _op string, ts long", parts=4)
    df.write.format("firn").options(**options).option("order_by", "ts").mode("append").save(
        table.name
    )
    assert table.current_snapshot() == before + 1, "one change set, one snapshot"
    model = model_of(
        [
            {"part": "a", "k": 1, "qty": 1, "label": "x", "_op": "U"},
            {"part": "b", "k": 2, "qty": 2, "label": "y", "_op": "U"},
            *(
                {c: v for c, v in op.items() if c != "ts"}
                for op in sorted(ops, key=lambda o: o["ts"])
            ),
        ]
    )
    assert view_of(table) == model.view()
    assert recorded(table) == set()
    assert {f.split("/")[0] for f in stored(table)} == {"change"} | {"spark"}
    seqs = set(table.files().column("seq").to_pylist())
    assert len(seqs) == 2, "the Spark write registered its files under one seq"


def test_op_option_upserts_and_deletes_without_an_op_column(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    rows = [{"part": "a", "k": k, "qty": k, "label": "x"} for k in range(20)]
    frame(spark, rows, SPARK_SCHEMA).write.format("firn").options(**options).mode("append").save(
        table.name
    )
    keys = spark.createDataFrame([("a", k) for k in range(5)], "part string, k long")
    keys.write.format("firn").options(**options).option("op", "delete").mode("append").save(
        table.name
    )
    assert sorted(k for _, k in view_of(table)) == list(range(5, 20))


def test_overwrite_is_a_load_of_the_table_or_of_the_partitions_present(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    table.upsert(
        pa.table({"part": ["a", "b", "c"], "k": [1, 2, 3], "qty": [1, 2, 3], "label": ["o"] * 3})
    )
    rows = [{"part": p, "k": k, "qty": k, "label": "load"} for p in "ab" for k in range(50)]
    writer = frame(spark, rows, SPARK_SCHEMA).write.format("firn").options(**options)
    writer.option("partitionOverwriteMode", "dynamic").mode("overwrite").save(table.name)
    expected = {(r["part"], r["k"]): r for r in rows}
    expected[("c", 3)] = {"part": "c", "k": 3, "qty": 3, "label": "o"}
    assert view_of(table) == expected
    live = table.files()
    loaded = live.filter(pc.not_equal(live.column("partition"), "part=c"))
    assert set(loaded.column("store").to_pylist()) == {"base"}
    assert recorded(table) == set()
    # static (Spark's default): the whole table is replaced.
    frame(spark, rows[:10], SPARK_SCHEMA).write.format("firn").options(**options).mode(
        "overwrite"
    ).save(table.name)
    assert view_of(table) == {(r["part"], r["k"]): r for r in rows[:10]}
    assert firn.compact(table, engine="local")["plans"] == [], "nothing left to compact"


def test_a_key_twice_across_tasks_is_refused_and_nothing_is_left(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    rows = [{"part": "a", "k": k % 30, "qty": k, "label": "x"} for k in range(60)]
    before = table.current_snapshot()
    with pytest.raises(Exception, match="at most one row per key"):
        frame(spark, rows, SPARK_SCHEMA, parts=3).write.format("firn").options(**options).mode(
            "append"
        ).save(table.name)
    assert table.current_snapshot() == before
    assert stored(table) == set()
    assert recorded(table) == set()
    with pytest.raises(Exception, match="at most one row per key"):
        frame(spark, rows, SPARK_SCHEMA, parts=3).write.format("firn").options(**options).mode(
            "overwrite"
        ).save(table.name)
    assert table.current_snapshot() == before
    assert stored(table) == set()
    assert recorded(table) == set()


def test_a_failed_job_leaves_no_staged_file_and_commits_nothing(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    table.upsert(pa.table({"part": ["a"], "k": [1], "qty": [1], "label": ["x"]}))
    before, files = table.current_snapshot(), stored(table)
    rows = [
        {"part": "a", "k": k, "qty": k, "label": "x", "_op": "X" if k == 77 else "U"}
        for k in range(100)
    ]
    with pytest.raises(Exception, match="unknown '_op' values"):
        frame(spark, rows, f"{SPARK_SCHEMA}, _op string", parts=4).write.format("firn").options(
            **options
        ).mode("append").save(table.name)
    assert table.current_snapshot() == before
    assert stored(table) == files, "the other tasks' files are deleted by abort"
    assert recorded(table) == set()


@pytest.mark.parametrize(
    ("schema", "row", "extra", "message"),
    [
        ("part string, qty long, label string", ("a", 1, "x"), {}, r"missing \['k'\]"),
        (
            "part string, k string, qty long, label string",
            ("a", "1", 1, "x"),
            {},
            "column 'k' has type string",
        ),
        (f"{SPARK_SCHEMA}, _op string", ("a", 1, 1, "x", "U"), {"op": "upsert"}, "keep one"),
        (SPARK_SCHEMA, ("a", 1, 1, "x"), {"op": "merge"}, "op must be 'upsert' or 'delete'"),
        (SPARK_SCHEMA, ("a", 1, 1, "x"), {"order_by": "ts"}, "order_by column 'ts' is not"),
    ],
)
def test_bad_dataframes_are_refused_before_any_task_and_change_nothing(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    schema: str,
    row: tuple[Any, ...],
    extra: dict[str, str],
    message: str,
) -> None:
    table = new_table(catalog)
    df = spark.createDataFrame([row], schema)
    with pytest.raises(Exception, match=message):
        df.write.format("firn").options(**options, **extra).mode("append").save(table.name)
    assert table.current_snapshot() == 0
    assert stored(table) == set()
    assert recorded(table) == set()


def test_an_unknown_table_is_refused(spark: SparkSession, options: dict[str, str]) -> None:
    df = spark.createDataFrame([("a", 1, 1, "x")], SPARK_SCHEMA)
    with pytest.raises(Exception, match="no table named 'nope'"):
        df.write.format("firn").options(**options).mode("append").save("nope")


def test_a_stream_commits_each_micro_batch_once_even_when_spark_runs_it_again(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str], tmp_path: Path
) -> None:
    table = new_table(catalog)
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    source.mkdir()
    batches = [
        [{"part": "a", "k": k, "qty": k, "label": "one", "_op": "U"} for k in range(10)],
        [{"part": "a", "k": k, "qty": -k, "label": "two", "_op": "U"} for k in range(5, 15)]
        + [{"part": "a", "k": 0, "qty": None, "label": None, "_op": "D"}],
    ]

    def run() -> None:
        stream = (
            spark.readStream.schema(f"{SPARK_SCHEMA}, _op string")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .writeStream.format("firn")
            .options(**options)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(table.name)
        )
        stream.awaitTermination(120)
        assert stream.exception() is None

    for n, rows in enumerate(batches):  # one file, one run, one micro-batch each
        (source / f"{n}.json").write_text("\n".join(json.dumps(r) for r in rows))
        run()
    model = model_of([r for batch in batches for r in batch])
    assert view_of(table) == model.view()
    assert table.current_snapshot() == 2, "one snapshot per micro-batch"
    # Spark's commit log loses the last batch (as when the driver dies between
    # Firn's commit and Spark's): the restarted query runs batch 1 again.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run()
    assert (checkpoint / "commits" / str(last)).exists(), "Spark ran the batch again"
    assert table.current_snapshot() == 2, "the batch run again is not committed again"
    assert stored(table) == set(table.files().column("path").to_pylist()), (
        "the files the batch wrote again are deleted"
    )
    assert view_of(table) == model.view()
    # The stream's one directory stays staged for its next batches.
    (staged,) = recorded(table)
    assert staged.startswith("stream/")
    assert staged.endswith("/")


MODEL_SCHEMA = table_schema(KEY_KINDS[0])


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(commits=st.lists(operations(KEY_KINDS[0]), min_size=1, max_size=3), parts=st.integers(1, 4))
def test_random_change_sets_written_by_spark_read_as_the_model(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    commits: list[list[dict[str, Any]]],
    parts: int,
) -> None:
    table = catalog.create_table(
        f"spark_model_{next(_names)}", MODEL_SCHEMA, ["part", "k"], ["part"], {"change.buckets": 2}
    )
    model = ReferenceModel()
    for number, ops in enumerate(commits, start=1):
        rows = [{**op, "ts": n} for n, op in enumerate(ops)]
        df = spark.createDataFrame(
            [tuple(r.values()) for r in rows],
            "part string, k long, qty long, label string, price double, _op string, ts long",
        ).repartition(parts)
        df.write.format("firn").options(**options).option("order_by", "ts").mode("append").save(
            table.name
        )
        model.apply(ops)
        assert table.current_snapshot() == number
        assert as_view(table.read()) == model.view()
    assert recorded(table) == set()


# -- schema evolution ---------------------------------------------------------------


def test_merge_schema_adds_a_new_column_and_reads_follow_the_snapshot_schema(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    table.upsert(pa.table({"part": ["a"], "k": [1], "qty": [1], "label": ["x"]}))
    first = table.current_snapshot()
    rows = [{"part": "b", "k": 2, "qty": 2, "label": "y", "tag": "new"}]
    df = frame(spark, rows, f"{SPARK_SCHEMA}, tag string", parts=1)
    with pytest.raises(Exception, match=r"merge_schema=True"):
        df.write.format("firn").options(**options).mode("append").save(table.name)
    assert table.refresh().schema.names == SCHEMA.names  # the refused write changed nothing
    df.write.format("firn").options(**options).option("mergeSchema", "true").mode("append").save(
        table.name
    )
    assert table.refresh().schema.names == [*SCHEMA.names, "tag"]
    read = spark.read.format("firn").options(**options).load(table.name)
    assert {r["k"]: r["tag"] for r in read.collect()} == {1: None, 2: "new"}
    old = spark.read.format("firn").options(**options).option("snapshot", str(first))
    assert old.load(table.name).columns == SCHEMA.names
    # A renamed column reads under its new name at the latest snapshot only.
    with table.update_schema() as u:
        u.rename_column("label", "title")
    renamed = spark.read.format("firn").options(**options).load(table.name)
    assert {r["k"]: r["title"] for r in renamed.collect()} == {1: "x", 2: "y"}


def test_a_schema_change_while_a_spark_compaction_runs_loses_nothing(
    spark: SparkSession, catalog: firn.Catalog
) -> None:
    table = new_table(catalog, **{"target-file-size": "4KiB"})
    model = ReferenceModel()
    for n in range(6):
        ops = [
            {"part": p, "k": k, "qty": n * k, "label": f"{n}", "_op": "U"}
            for p in "abc"
            for k in range(n, 40, 3)
        ]
        table.commit(pa.Table.from_pylist(ops, schema=SCHEMA.append(pa.field("_op", pa.string()))))
        model.apply(ops)
    changed = threading.Event()

    def change_schema() -> None:
        time.sleep(0.5)  # while the Spark job runs (it takes seconds)
        # Another process's connection, as an administrator's would be.
        with (
            firn.connect(settings=catalog.settings) as other,
            other.table(table.name).update_schema() as u,
        ):
            u.add_column("flag", pa.bool_(), default=True)
            u.delete_column("label")
        changed.set()

    changer = threading.Thread(target=change_schema)
    changer.start()
    summary = firn.compact(table, kind="full", engine="spark", spark=spark)
    changer.join()
    assert changed.is_set()
    assert summary["failed_attempts"] == 0, summary["errors"]
    read = table.refresh().read()
    assert read.schema.names == ["part", "k", "qty", "flag"]
    expected = {
        key: {"part": row["part"], "k": row["k"], "qty": row["qty"], "flag": True}
        for key, row in model.view().items()
    }
    assert as_view(read) == expected
    # What the plan wrote is of the version it was planned under, or later ones read it.
    assert firn.compact(table, kind="full", engine="spark", spark=spark)["failed_attempts"] == 0
    assert {r["schema_id"] for r in table.files().to_pylist()} == {table.schema_id}
    assert as_view(table.read()) == expected


# -- the JVM loader (firn.spark.write, mode overwrite) ------------------------------

LOADER_KINDS = [
    k for k in KEY_KINDS if k.name in ("int64", "int32", "string", "binary", "date", "timestamp")
]
"""The key kinds the loader and the append's shuffle by change node both take."""
DECIMAL_KIND = next(k for k in KEY_KINDS if k.name == "decimal")
"""A key kind the loader takes but the append's shuffle by change node does not."""
SPARK_KEY_TYPES = {
    "decimal": "decimal(12,2)",
    "int64": "long",
    "int32": "int",
    "string": "string",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamp",
}


def written_by_loader(table: firn.Table, paths: list[str] | None = None) -> bool:
    """Whether every live file (or every one of ``paths``) was written by the JVM loader
    (Spark's Parquet writer leaves its schema in the footer; pyarrow does not)."""
    if paths is None:
        paths = table.files().column("path").to_pylist()
    return bool(paths) and all(
        b"org.apache.spark.sql.parquet.row.metadata"
        in (pq.read_metadata(table.storage.full_path(p)).metadata or {})
        for p in paths
    )


def assert_in_their_nodes(table: firn.Table) -> None:
    """Every row of every base file hashes into the file's node, and each file is in key
    order with its catalog key range (what the merge of later changes relies on)."""
    for f in table.files().to_pylist():
        rows = pq.read_table(table.storage.full_path(f["path"]))
        keys = rows.select(list(table.definition.primary_key))
        nodes = node_index(hash_keys(keys.columns), f["node_m"])
        assert set(nodes.tolist()) == {f["node_i"]}, f["path"]
        order = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in keys.column_names])
        assert order.to_pylist() == list(range(rows.num_rows)), f["path"]
        assert f["records"] == rows.num_rows


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from([*LOADER_KINDS, DECIMAL_KIND]),
    keys=st.sets(st.tuples(st.sampled_from(["a", "b", "é/x y"]), st.integers(0, 60)), max_size=80),
    buckets=st.sampled_from([1, 2, 4]),
    parts=st.integers(1, 3),
    target=st.sampled_from(["1KiB", "128MiB"]),
    later=operations(KEY_KINDS[0]),
)
def test_the_jvm_loader_loads_as_the_model(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    kind: Any,
    keys: set[tuple[str, int]],
    buckets: int,
    parts: int,
    target: str,
    later: list[dict[str, Any]],
) -> None:
    """Loads of every key type the loader takes, partitioned, at several tree levels and
    file sizes, then changes committed on top and compacted: always the model."""
    table = catalog.create_table(
        f"spark_load_{next(_names)}",
        table_schema(kind),
        ["part", "k"],
        ["part"],
        {"base.buckets": buckets, "change.buckets": 2, "target-file-size": target},
    )
    old = {"part": "z", "k": kind.value(1), "qty": 1, "label": "old", "price": 0.5}
    table.upsert(pa.Table.from_pylist([old], schema=table_schema(kind)))
    rows = [
        {
            "part": p,
            "k": kind.value(n),
            "qty": n,
            "label": f"l{n}" if n % 4 else None,
            "price": n / 3,
        }
        for p, n in sorted(keys)
    ]
    schema = f"part string, k {SPARK_KEY_TYPES[kind.name]}, qty long, label string, price double"
    df = spark.createDataFrame([tuple(r.values()) for r in rows], schema).repartition(parts)
    firn.spark.write(df, table.name, "overwrite", **options)
    model = ReferenceModel()
    model.apply([{**r, "_op": "U"} for r in rows])
    assert as_view(table.read()) == model.view()
    assert recorded(table) == set()
    if rows:
        assert written_by_loader(table)
        assert_in_their_nodes(table)
    ops = [{**op, "k": kind.value(op["k"] + 8)} for op in later]  # KEY_KINDS[0] is n - 8
    table.commit(
        pa.Table.from_pylist(ops, schema=table_schema(kind).append(pa.field("_op", pa.string())))
    )
    model.apply(ops)
    assert as_view(table.read()) == model.view()
    firn.compact(table, engine="local")
    assert as_view(table.read()) == model.view()


def test_the_jvm_loader_refuses_a_key_twice_and_leaves_nothing(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    table.upsert(pa.table({"part": ["a"], "k": [1], "qty": [1], "label": ["x"]}))
    before, files = table.current_snapshot(), stored(table)
    # In one task: the loader finds it as it writes.
    rows = [{"part": "a", "k": k % 30, "qty": k, "label": "x"} for k in range(60)]
    with pytest.raises(firn.ConfigError, match=r'key \["a",0\] appears more than once'):
        firn.spark.write(
            frame(spark, rows, SPARK_SCHEMA, parts=1), table.name, "overwrite", **options
        )
    # Across tasks: the driver finds it among the tasks' files.
    rows = [{"part": "a", "k": k % 30, "qty": k, "label": "x"} for k in range(30, 90)]
    df = spark.createDataFrame([tuple(r.values()) for r in rows], SPARK_SCHEMA, verifySchema=False)
    with pytest.raises(firn.ConfigError, match="appears more than once"):
        firn.spark.write(df.coalesce(1).repartition(2, "qty"), table.name, "overwrite", **options)
    # A null key.
    df = spark.createDataFrame([("a", None, 1, "x")], "part string, k long, qty long, label string")
    with pytest.raises(Exception, match="null"):
        firn.spark.write(df, table.name, "overwrite", **options)
    # A key string holding a NUL character, which the catalog cannot keep.
    df = spark.createDataFrame([("a", 1, 1, "x"), ("a\x00b", 2, 1, "x")], SPARK_SCHEMA)
    with pytest.raises(Exception, match="key column part has a value with a NUL character"):
        firn.spark.write(df.coalesce(1), table.name, "overwrite", **options)
    assert table.current_snapshot() == before
    assert stored(table) == files
    assert recorded(table) == set()


def test_the_jvm_loader_replaces_only_the_partitions_present_when_dynamic(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog)
    table.upsert(pa.table({"part": ["a", "c"], "k": [1, 3], "qty": [1, 3], "label": ["o", "o"]}))
    rows = [{"part": p, "k": k, "qty": k, "label": "load"} for p in "ab" for k in range(50)]
    firn.spark.write(
        frame(spark, rows, SPARK_SCHEMA),
        table.name,
        "overwrite",
        partitionOverwriteMode="dynamic",
        **options,
    )
    expected = {(r["part"], r["k"]): r for r in rows}
    expected[("c", 3)] = {"part": "c", "k": 3, "qty": 3, "label": "o"}
    assert view_of(table) == expected
    live = table.files()
    loaded = live.filter(pc.not_equal(live.column("partition"), "part=c"))
    assert set(loaded.column("store").to_pylist()) == {"base"}
    assert written_by_loader(table, loaded.column("path").to_pylist())
    assert recorded(table) == set()


def test_a_format_firn_overwrite_is_written_by_the_jvm_loader_when_it_takes_it(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``df.write.format("firn").mode("overwrite")`` asks the driver's Python for the JVM
    loader's plan (``firn.spark.jvm_format``): a DataFrame of the table's columns (by
    name and type, in any order) is loaded by it, dynamically or whole; one of other
    columns or types by the Python source; a failed load leaves nothing staged."""
    assert firn.spark.jvm.loaded(spark), "the JVM loader's jar is not built (make setup)"
    planned: list[bool] = []
    answer = jvm_format.jvm_load

    def spied(opts: Any, schema: str, reachable: Any) -> str | None:
        found = answer(opts, schema, reachable)
        planned.append(found is not None)
        return found

    monkeypatch.setattr(jvm_format, "jvm_load", spied)
    table = new_table(catalog)
    table.upsert(pa.table({"part": ["a", "c"], "k": [1, 3], "qty": [1, 3], "label": ["o", "o"]}))
    rows = [{"part": p, "k": k, "qty": k, "label": "load"} for p in "ab" for k in range(50)]

    def overwrite(df: DataFrame, **extra: str) -> None:
        df.write.format("firn").options(**options, **extra).mode("overwrite").save(table.name)

    overwrite(frame(spark, rows, SPARK_SCHEMA), partitionOverwriteMode="dynamic")
    assert planned == [True]
    expected = {(r["part"], r["k"]): r for r in rows}
    expected[("c", 3)] = {"part": "c", "k": 3, "qty": 3, "label": "o"}
    assert view_of(table) == expected
    live = table.files()
    loaded = live.filter(pc.not_equal(live.column("partition"), "part=c"))
    assert written_by_loader(table, loaded.column("path").to_pylist())
    assert_in_their_nodes(table)
    assert recorded(table) == set()

    overwrite(frame(spark, rows[:10], SPARK_SCHEMA))  # static: the whole table
    assert planned == [True, True]
    assert view_of(table) == {(r["part"], r["k"]): r for r in rows[:10]}
    assert written_by_loader(table)

    # The table's columns in another order: the loader takes each by name.
    order = ("label", "k", "qty", "part")
    overwrite(frame(spark, rows[40:60], SPARK_SCHEMA).select(*order))
    assert planned == [True, True, True]
    assert view_of(table) == {(r["part"], r["k"]): r for r in rows[40:60]}
    assert written_by_loader(table)
    assert_in_their_nodes(table)
    again = [{**r, "label": "again"} for r in rows[50:55]]  # partition b only
    overwrite(frame(spark, again, SPARK_SCHEMA).select(*order), partitionOverwriteMode="dynamic")
    assert planned == [True, True, True, True]
    assert view_of(table) == {(r["part"], r["k"]): r for r in rows[40:50] + again}

    # Columns of a narrower type: the Python source loads them.
    narrower = frame(spark, rows[20:30], "part string, k int, qty long, label string")
    overwrite(narrower)
    assert planned == [True, True, True, True, False]
    assert view_of(table) == {(r["part"], r["k"]): r for r in rows[20:30]}
    assert not written_by_loader(table)

    # A key twice in one task: the loader fails the job, and nothing is left staged.
    before, files = table.current_snapshot(), stored(table)
    twice = [{"part": "a", "k": k % 30, "qty": k, "label": "x"} for k in range(60)]
    with pytest.raises(Exception, match="appears more than once"):
        overwrite(frame(spark, twice, SPARK_SCHEMA, parts=1))
    assert planned[-1] is True
    assert table.current_snapshot() == before
    assert stored(table) == files
    assert recorded(table) == set()


def test_a_load_the_jvm_loader_does_not_take_goes_through_the_firn_source(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    table = new_table(catalog, **{"file.compression": "lz4"})
    rows = [{"part": "a", "k": k, "qty": k, "label": "x"} for k in range(10)]
    # An extra column: the loader wants exactly the table's; the firn source says why not.
    df = frame(spark, rows, SPARK_SCHEMA).withColumn("extra", F.lit(1))
    with pytest.raises(Exception, match="unexpected"):
        firn.spark.write(df, table.name, "overwrite", **options)
    unkeyed = catalog.create_table(f"spark_{next(_names)}", SCHEMA, [], ["part"])
    firn.spark.write(frame(spark, rows, SPARK_SCHEMA), unkeyed.name, "overwrite", **options)
    assert sorted(unkeyed.read().column("k").to_pylist()) == list(range(10))
    assert not written_by_loader(unkeyed)
    assert recorded(unkeyed) == set()


def test_the_jvm_loader_writes_every_type_it_takes_as_the_table_reads_it(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    """Each column type the loader takes (``firn.spark.load.writable``) reads back from
    its files as the table's type, through Firn's reader and Spark's."""
    SMALL, WIDE = pa.decimal128(9, 2), pa.decimal128(30, 4)
    schema = pa.schema(
        [
            pa.field("k", pa.string(), nullable=False),
            pa.field("i8", pa.int8()),
            pa.field("i16", pa.int16()),
            pa.field("i32", pa.int32()),
            pa.field("f32", pa.float32()),
            pa.field("flag", pa.bool_()),
            pa.field("raw", pa.binary()),
            pa.field("day", pa.date32()),
            pa.field("naive", pa.timestamp("us")),
            pa.field("zoned", pa.timestamp("us", "UTC")),
            pa.field("small", SMALL),
            pa.field("wide", WIDE),
        ]
    )
    rows = pa.table(
        {
            "k": ["b", "a", "ключ", ""],
            "i8": pa.array([1, None, -128, 127], pa.int8()),
            "i16": pa.array([300, -300, None, 0], pa.int16()),
            "i32": pa.array([1 << 30, None, -5, 7], pa.int32()),
            "f32": pa.array([1.5, None, -0.25, 3.0], pa.float32()),
            "flag": [True, False, None, True],
            "raw": [b"\x00\xff", None, b"", b"x"],
            "day": pa.array([19782, -1, None, 0], pa.int32()).cast(pa.date32()),
            "naive": pa.array([0, 1_700_000_000_123_456, None, -5], pa.timestamp("us")),
            "zoned": pa.array([None, 1, 2, 3], pa.timestamp("us", "UTC")),
            "small": pa.array(
                [Decimal("1.25"), None, Decimal("-9999999.99"), 0], pa.decimal128(9, 2)
            ),
            "wide": pa.array(
                [Decimal("12345678901234567890.1234"), None, 0, 1], pa.decimal128(30, 4)
            ),
        }
    )
    table = catalog.create_table(f"spark_{next(_names)}", schema, ["k"])
    ddl = (
        "k string, i8 tinyint, i16 smallint, i32 int, f32 float, flag boolean, raw binary, "
        "day date, naive timestamp_ntz, zoned timestamp, small decimal(9,2), wide decimal(30,4)"
    )
    df = spark.createDataFrame([tuple(r.values()) for r in rows.to_pylist()], ddl)
    firn.spark.write(df.repartition(2), table.name, "overwrite", **options)
    assert written_by_loader(table)
    expected = rows.cast(table.schema).sort_by("k")
    assert table.read().sort_by("k").equals(expected)
    settings = {k: options[k] for k in ("database_url", "database_schema", "warehouse")}
    back = firn.spark.read(spark, table.name, **settings).toArrow()
    assert back.cast(table.schema).sort_by("k").to_pylist() == expected.to_pylist()


def test_the_jvm_loader_takes_a_binary_key(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    """A binary key's bytes are hashed and ordered as Firn does (unsigned: 0x80 and above
    after ASCII), a NUL and the empty key among them; the files' key ranges are the
    catalog's (hex), and changes merge on top as the model."""
    schema = pa.schema([pa.field("k", pa.binary(), nullable=False), pa.field("v", pa.int64())])
    table = catalog.create_table(
        f"spark_binary_key_{next(_names)}", schema, ["k"], properties={"base.buckets": 4}
    )
    keys = [b"", b"\x00", b"\x00\x01", b"a", b"ab", b"\x7f", b"\x80", b"\xff", b"\xff\xff"]
    keys += [bytes([n, 255 - n, n % 7]) for n in range(0, 256, 3)]
    model = load_keys(spark, table, keys, "binary", options)
    # Each file's key range as the catalog keeps a binary key: its hex.
    for rows, (low, high) in file_key_ranges(table):
        assert (low, high) == ([rows[0].hex()], [rows[-1].hex()])
    commit_kv(table, model, {b"\x80": -1}, [b""])
    firn.compact(table, engine="local")
    assert kv(table) == model


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    key_type=st.sampled_from(["string", "binary"]),
    shared=st.sampled_from(["", "tenant-0000000/", "ключ-"]),
    suffixes=st.sets(
        # No NUL (the catalog cannot store it) and no lone surrogate (no UTF-8 for it).
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
            max_size=12,
        ),
        max_size=60,
    ),
)
def test_the_jvm_loader_sorts_in_its_tasks_keys_that_share_their_first_bytes(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    key_type: str,
    shared: str,
    suffixes: set[str],
) -> None:
    """An unpartitioned table keyed by a string or binary is sorted in the loader's tasks
    (``org.firn.spark.LoadSort``), each row's sort prefix the 8 key bytes after those all
    the task's keys share. Keys that are prefixes of one another, that tie in those 8
    bytes, or hold multi-byte characters, arriving in no order across three tasks, are
    written each file in key order and read as the model."""
    key = pa.field("k", pa.string() if key_type == "string" else pa.binary(), nullable=False)
    schema = pa.schema([key])
    table = catalog.create_table(
        f"spark_shared_{next(_names)}",
        schema.append(pa.field("v", pa.int64())),
        ["k"],
        properties={"base.buckets": 2},
    )
    tails = suffixes | {"", "abcdefgh", "abcdefgh1", "abcdefgh2", "abcdefghé", "b"}
    keys = [shared + t for t in sorted(tails)]
    load_keys(
        spark,
        table,
        keys if key_type == "string" else [k.encode() for k in keys],
        key_type,
        options,
    )


@pytest.mark.parametrize("key_type", ["string", "long"])
def test_the_jvm_loader_refuses_a_key_twice_or_a_null_key_it_sorts_itself(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str], key_type: str
) -> None:
    """A string- or integer-keyed load sorted in its task finds a key seen twice (once
    sorted, the two rows adjacent: the rows come in descending order, and the first key
    twice in key order is named) and a null key, as the loader does after Spark's sort."""
    arrow_type = pa.string() if key_type == "string" else pa.int64()
    schema = pa.schema([pa.field("k", arrow_type, nullable=False), pa.field("v", pa.int64())])
    table = catalog.create_table(f"spark_sorted_twice_{next(_names)}", schema, ["k"])
    before = table.current_snapshot()
    key = (lambda n: f"id-{n:04d}") if key_type == "string" else (lambda n: n)
    rows = [(key(n % 50), n) for n in range(99, -1, -1)]
    df = spark.createDataFrame(rows, f"k {key_type}, v long").coalesce(1)
    first = '"id-0000"' if key_type == "string" else "0"
    with pytest.raises(firn.ConfigError, match=rf"key \[{first}\] appears more than once"):
        firn.spark.write(df, table.name, "overwrite", **options)
    df = spark.createDataFrame(
        [(key(2), 1), (None, 2), (key(1), 3)], f"k {key_type}, v long"
    ).coalesce(1)
    with pytest.raises(Exception, match="null"):
        firn.spark.write(df, table.name, "overwrite", **options)
    assert table.current_snapshot() == before
    assert recorded(table) == set()


KEY_COLUMN_TYPES = {
    "long": (pa.int64(), "long", lambda n: n),
    "int": (pa.int32(), "int", lambda n: n),
    "short": (pa.int16(), "short", lambda n: n),
    "date": (pa.date32(), "date", lambda n: date(2020, 1, 1) + timedelta(days=n)),
    "string": (pa.string(), "string", lambda n: f"s{n}"),
    "binary": (pa.binary(), "binary", lambda n: f"b{n}".encode()),
}


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    key_types=st.sampled_from(
        [
            ("long",),
            ("int",),
            ("short",),
            ("date",),
            ("string", "long"),
            ("long", "string"),
            ("short", "binary"),
        ]
    ),
    numbers=st.sets(st.integers(-(2**15), 2**15 - 1), max_size=120),
    arrival=st.sampled_from(["ascending", "descending", "shuffled"]),
    memory=st.sampled_from(["", "400"]),
    partitioned=st.booleans(),
)
def test_the_jvm_loader_sorts_integer_and_composite_keys_in_its_tasks_as_they_arrive(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    key_types: tuple[str, ...],
    numbers: set[int],
    arrival: str,
    memory: str,
    partitioned: bool,
) -> None:
    """A table keyed by integers, dates, or a composite key of them and strings or
    binaries, loaded by the JVM loader from three tasks whose rows come in key order
    (written as they come), in reverse, or in no order (sorted in the task by
    ``org.firn.spark.LoadSort``), and with ``spark.firn.load.sortMemoryBytes`` so low that
    each task hands its rows to Spark's sorter after a few: each file in key order and in
    its node, and the table the model. A composite key's first column takes three values:
    unpartitioned, most rows tie on the sort's prefix and are ordered by their whole keys;
    partitioned by it, each task sorts each of its partitions on its own."""
    columns = [f"k{i}" for i in range(len(key_types))]
    schema = pa.schema(
        [
            pa.field(c, KEY_COLUMN_TYPES[t][0], nullable=False)
            for c, t in zip(columns, key_types, strict=True)
        ]
        + [pa.field("v", pa.int64())]
    )
    partition = columns[:1] if partitioned and len(columns) > 1 else []
    table = catalog.create_table(
        f"spark_in_task_{next(_names)}", schema, columns, partition, {"base.buckets": 2}
    )

    def key(n: int) -> tuple[Any, ...]:
        if len(key_types) == 1:
            return (KEY_COLUMN_TYPES[key_types[0]][2](n),)
        return (KEY_COLUMN_TYPES[key_types[0]][2](n % 3), KEY_COLUMN_TYPES[key_types[1]][2](n))

    rows = sorted((*key(n), n) for n in numbers)
    if arrival == "descending":
        rows.reverse()
    elif arrival == "shuffled":
        rows.sort(key=lambda r: (r[-1] * 7919) % 65_537)
    spark_types = ", ".join(
        f"{c} {KEY_COLUMN_TYPES[t][1]}" for c, t in zip(columns, key_types, strict=True)
    )
    # parallelize keeps each task's rows in the list's order.
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), f"{spark_types}, v long")
    spark.conf.set(SORT_MEMORY, memory)
    try:
        firn.spark.write(df, table.name, "overwrite", **options)
    finally:
        spark.conf.unset(SORT_MEMORY)
    assert written_by_loader(table) or not rows
    assert_in_their_nodes(table)
    assert sorted(tuple(r.values()) for r in table.read().to_pylist()) == sorted(rows)


SORT_MEMORY = "spark.firn.load.sortMemoryBytes"
STREAM_AFTER = 4096
"""``org.firn.spark.LoadWriter.STREAM_AFTER``: rows a task that sorts its own holds before
it writes them as they come, if they came in order."""


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize("key_type", ["long", "string"])
def test_the_jvm_loader_writes_rows_as_they_come_until_one_comes_out_of_order(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    key_type: str,
    partitioned: bool,
) -> None:
    """A task whose first rows (more than ``STREAM_AFTER``) come in key order writes them
    as they come. At the first row out of order (a key before the last, or a partition
    before the last) its files so far are finished and the rest are held and sorted into
    files of their own, revisiting partitions written before: those files' key ranges
    overlap the first ones'. The table is the model; a key in both parts is found by the
    driver's look across files whose ranges overlap, and nothing is committed."""
    arrow_type, spark_type, key = KEY_COLUMN_TYPES[key_type]
    parts = [pa.field("p", pa.int64(), nullable=False)] if partitioned else []
    schema = pa.schema(
        [*parts, pa.field("k", arrow_type, nullable=False), pa.field("v", pa.int64())]
    )
    table = catalog.create_table(
        f"spark_streamed_{next(_names)}",
        schema,
        ["p", "k"] if partitioned else ["k"],
        ["p"] if partitioned else [],
        {"base.buckets": 2},
    )

    def row(n: int) -> tuple[Any, ...]:
        return ((n % 3,) if partitioned else ()) + (key(n), n)

    in_order = sorted(row(2 * n) for n in range(5000))
    assert len(in_order) > STREAM_AFTER
    later = sorted((row(2 * n + 1) for n in range(3000)), key=lambda r: (r[-1] * 7919) % 65_537)
    ddl = f"{'p long, ' if partitioned else ''}k {spark_type}, v long"

    def load(rows: list[tuple[Any, ...]]) -> None:
        # One task, its rows in the list's order.
        df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), ddl)
        firn.spark.write(df, table.name, "overwrite", **options)

    load(in_order + later)
    assert written_by_loader(table)
    assert_in_their_nodes(table)
    assert sorted(tuple(r.values()) for r in table.read().to_pylist()) == sorted(in_order + later)
    ranges: dict[tuple[str, int], list[tuple[Any, Any]]] = {}
    for f in table.files().to_pylist():
        keys = pq.read_table(table.storage.full_path(f["path"]), columns=["k"]).column("k")
        ranges.setdefault((f["partition"], f["node_i"]), []).append(
            (pc.min(keys).as_py(), pc.max(keys).as_py())
        )
    overlapping = [
        place
        for place, spans in ranges.items()
        if any(lo <= hi for (_, hi), (lo, _) in itertools.pairwise(sorted(spans)))
    ]
    assert overlapping, ranges
    before = table.current_snapshot()
    with pytest.raises(firn.ConfigError, match="more than once"):
        load([*in_order, row(10), *later])
    assert table.current_snapshot() == before


def test_the_sort_memory_setting_reaches_the_loaders_tasks_and_must_be_bytes(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str]
) -> None:
    """The setting the integer-key test lowers is read in the tasks: a value that is not a
    number of bytes fails the load, naming it, and leaves nothing."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    table = catalog.create_table(f"spark_sort_memory_{next(_names)}", schema, ["k"])
    spark.conf.set(SORT_MEMORY, "lots")
    try:
        with pytest.raises(Exception, match=f"{SORT_MEMORY} must be a number of bytes, got lots"):
            firn.spark.write(
                spark.range(10).selectExpr("id AS k", "id AS v"), table.name, "overwrite", **options
            )
    finally:
        spark.conf.unset(SORT_MEMORY)
    assert table.current_snapshot() is None or table.read().num_rows == 0
    assert recorded(table) == set()


def load_keys(
    spark: SparkSession, table: firn.Table, keys: list[Any], key_type: str, options: dict[str, str]
) -> dict[Any, int]:
    """Load ``keys`` (each with its position as v) into a table of k, v by the JVM loader
    from a DataFrame of three tasks; check that the loader wrote them, each row in its
    node and each file in key order, and that the table reads as the model returned."""
    df = spark.createDataFrame([(k, i) for i, k in enumerate(keys)], f"k {key_type}, v long")
    firn.spark.write(df.repartition(3), table.name, "overwrite", **options)
    assert written_by_loader(table)
    assert_in_their_nodes(table)
    model = {k: i for i, k in enumerate(keys)}
    assert kv(table) == model
    return model


def kv(table: firn.Table) -> dict[Any, Any]:
    """A table of columns k, v as a dict."""
    return dict(zip(*table.read().to_pydict().values(), strict=True))


def file_key_ranges(table: firn.Table) -> list[tuple[list[Any], tuple[Any, Any]]]:
    """Each live file's keys (column k, as read) and its (min_key, max_key) in the catalog."""
    return [
        (
            pq.read_table(table.storage.full_path(e.path)).column("k").to_pylist(),
            (e.min_key, e.max_key),
        )
        for e in files_at(catalog_conn(table), table.table_id, table.current_snapshot())
    ]


@pytest.mark.parametrize("precision", [12, 38])
def test_the_jvm_loader_takes_a_decimal_key(
    spark: SparkSession, catalog: firn.Catalog, options: dict[str, str], precision: int
) -> None:
    """A decimal key (12 digits, which Spark holds as a long; 38, as bytes) is hashed by
    its unscaled value and ordered as its number, negatives first; the files' key ranges
    are the catalog's (the decimals' text), and changes merge on top as the model."""
    scale = 2 if precision == 12 else 0
    key_type = pa.decimal128(precision, scale)
    schema = pa.schema([pa.field("k", key_type, nullable=False), pa.field("v", pa.int64())])
    table = catalog.create_table(
        f"spark_decimal_key_{next(_names)}", schema, ["k"], properties={"base.buckets": 4}
    )
    unit = Decimal("0.01") if scale else Decimal(10) ** 30
    keys = [Decimal(n) * unit + (Decimal(n % 3) if not scale else 0) for n in range(-300, 300, 7)]
    keys += [Decimal(0), Decimal(1) if not scale else Decimal("0.01")]
    keys = sorted(set(keys))
    model = load_keys(spark, table, keys, f"decimal({precision},{scale})", options)
    # Each file's key range as the catalog keeps a decimal key: its text, which reads
    # back as the file's first and last keys.
    for rows, (low, high) in file_key_ranges(table):
        assert rows == sorted(rows)
        assert (low, high) == ([str(rows[0])], [str(rows[-1])])
    commit_kv(table, model, {keys[0]: -1}, [keys[-1]])
    firn.compact(table, engine="local")
    assert kv(table) == model


# -- appends shuffled by change node (firn.spark.write, mode append) -----------------


def test_the_spark_change_node_is_the_key_hash_node(spark: SparkSession) -> None:
    """``firn_change_node`` (the jar's port, fed ``key_lanes``) puts every key of every
    type the shuffle takes in the node ``firn.model.keyhash`` does, composite keys too."""
    spark.udf.registerJavaFunction(FUNCTION, FUNCTION_CLASS, IntegerType())
    for kind in LOADER_KINDS:
        definition = table_schema(kind)
        # Negative numbers too, but a binary key's bytes are numbers from 0 to 255.
        numbers = range(0, 240, 7) if kind.name == "binary" else range(-40, 200, 7)
        keys = [("é/x y" if n % 2 else "a", kind.value(n)) for n in numbers]
        df = spark.createDataFrame(keys, f"part string, k {SPARK_KEY_TYPES[kind.name]}")
        stub = _KeyedStub(definition, ("part", "k"))
        lanes = key_lanes(df, stub)  # type: ignore[arg-type]
        assert lanes is not None, kind.name
        for level in (2, 4, 16):
            got = df.select(F.call_function(FUNCTION, F.struct(*lanes), F.lit(level))).collect()
            columns = [pa.array([p for p, _ in keys]), pa.array([k for _, k in keys], kind.type)]
            expected = node_index(hash_keys(columns), level)
            assert [r[0] for r in got] == expected.tolist(), (kind.name, level)


class _KeyedStub:
    """What ``key_lanes`` reads of a table: its definition and name."""

    def __init__(self, schema: pa.Schema, key: tuple[str, ...]) -> None:
        self.name = "stub"
        self.definition = TableSchema.build("stub", schema, list(key), [])


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from([*LOADER_KINDS, DECIMAL_KIND]),
    commits=st.lists(operations(KEY_KINDS[0]), min_size=1, max_size=2),
    buckets=st.sampled_from([2, 4]),
    parts=st.integers(2, 4),
)
def test_an_append_shuffled_by_change_node_writes_a_file_per_node_and_reads_as_the_model(
    spark: SparkSession,
    catalog: firn.Catalog,
    options: dict[str, str],
    kind: Any,
    commits: list[list[dict[str, Any]]],
    buckets: int,
    parts: int,
) -> None:
    """``firn.spark.write(df, name, "append")`` of a DataFrame of several tasks: each
    (partition, node, operation) of a change set is one file (a decimal key, which the
    shuffle does not take, is written unshuffled), and the table is the model."""
    table = catalog.create_table(
        f"spark_append_{next(_names)}",
        table_schema(kind),
        ["part", "k"],
        ["part"],
        {"change.buckets": buckets, "change.split-rows": 0},
    )
    spark_key = SPARK_KEY_TYPES[kind.name]
    model = ReferenceModel()
    for number, later in enumerate(commits, start=1):
        ops = [{**op, "k": kind.value(op["k"] + 8), "ts": n} for n, op in enumerate(later)]
        df = spark.createDataFrame(
            [tuple(r.values()) for r in ops],
            f"part string, k {spark_key}, qty long, label string, price double, _op string, "
            "ts long",
        ).repartition(parts)
        firn.spark.write(df, table.name, "append", order_by="ts", **options)
        model.apply([{c: v for c, v in op.items() if c != "ts"} for op in ops])
        assert table.current_snapshot() == number
        assert as_view(table.read()) == model.view()
    files = table.files().to_pylist()
    groups = Counter((f["seq"], f["partition"], f["node_m"], f["node_i"], f["type"]) for f in files)
    if kind in LOADER_KINDS:  # the kinds the shuffle takes
        assert set(groups.values()) == {1}, groups
    assert recorded(table) == set()
