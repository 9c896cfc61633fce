"""``spark.read.format("firn")`` on local Spark, against the reference model.

Random change sets (same-commit delete-then-insert included), compactions
(``engine="local"``) and bucket changes in between, so files sit at several tree
levels: the DataFrame equals the model, at the latest snapshot and at an older one;
random filters (DataFrame ``where`` and SQL on a temporary view) equal filtering
the model with SQL's three-valued logic; an incremental read equals
``Table.changes``. Pushed filters prune: the Spark partitions of a filtered read are
the scan's kept splits. Columns, a snapshot read across a compaction, and bad input
are checked too.
"""

from __future__ import annotations

import datetime as dt
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import datasource as sds
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

import firn
import firn.spark
import firn.spark.native
from firn.catalog.expiry import expire
from firn.catalog.files import files_at
from firn.engine.spark_session import spark_session
from firn.errors import ConfigError
from firn.settings import FirnSettings
from firn.spark import catalogs, jvm
from firn.spark.reader import SplitPartition, firn_reader, read_schema
from tests.changesets import (
    KEY_KINDS,
    PARTS,
    KeyKind,
    ReferenceModel,
    Row,
    Step,
    as_change_set,
    as_view,
    evolving_table,
    operations,
    table_schema,
)
from tests.hash_tree import HASH_TREE
from tests.integration.table_checks import (
    base_entries,
    catalog_conn,
    commit_kv,
    hide_rows,
    rows_at,
)

_names = itertools.count()


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local session of this module's own (another module may have left one for
    another master running: one process has one SparkContext)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    session = spark_session(FirnSettings(spark_master="local[2]"), app_name="firn-reader-test")
    firn.spark.register(session)
    yield session
    session.stop()


def connection(settings: FirnSettings) -> dict[str, str]:
    """The read options that point at the test's catalog (its own schema)."""
    assert settings.database_url is not None
    return {
        "database_url": settings.database_url.get_secret_value(),
        "database_schema": settings.database_schema,
    }


def load(spark: SparkSession, settings: FirnSettings, name: str, **options: Any) -> DataFrame:
    reader = spark.read.format("firn").options(**connection(settings))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(name)


def arrow(df: DataFrame) -> pa.Table:
    return df.toArrow()


# -- filters: one tree, read by Spark and by Python -------------------------------

Expr = tuple[Any, ...]
_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def exprs(kind: KeyKind) -> st.SearchStrategy[Expr]:
    part = st.sampled_from(PARTS)
    key = st.integers(0, 15).map(kind.value)
    leaves = st.one_of(
        st.tuples(st.just("cmp"), st.just("part"), st.sampled_from(list(_OPS)), part),
        st.tuples(st.just("cmp"), st.just("k"), st.sampled_from(list(_OPS)), key),
        st.tuples(st.just("in"), st.just("k"), st.lists(key, min_size=1, max_size=3)),
        st.tuples(st.just("in"), st.just("part"), st.lists(part, min_size=1, max_size=2)),
        st.tuples(
            st.just("cmp"),
            st.just("qty"),
            st.sampled_from(list(_OPS)),
            st.integers(-(2**40), 2**40),
        ),
        st.tuples(st.just("null"), st.sampled_from(["qty", "label"])),
        st.tuples(st.just("starts"), st.just("label"), st.text("ab", max_size=1)),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(st.just("not"), inner),
            st.tuples(st.sampled_from(["and", "or"]), inner, inner),
        ),
        max_leaves=4,
    )


def to_column(e: Expr) -> Column:
    kind = e[0]
    if kind == "cmp":
        _, name, op, value = e
        return _OPS[op](F.col(name), F.lit(value))  # type: ignore[no-any-return]
    if kind == "in":
        return F.col(e[1]).isin(list(e[2]))
    if kind == "null":
        return F.col(e[1]).isNull()
    if kind == "starts":
        return F.col(e[1]).startswith(e[2])
    if kind == "not":
        return ~to_column(e[1])
    left, right = to_column(e[1]), to_column(e[2])
    return (left & right) if kind == "and" else (left | right)


def truth(e: Expr, row: Row) -> bool | None:
    """SQL's three-valued logic: None is unknown."""
    kind = e[0]
    if kind == "cmp":
        value = row[e[1]]
        return None if value is None else bool(_OPS[e[2]](value, e[3]))
    if kind == "in":
        value = row[e[1]]
        return None if value is None else value in e[2]
    if kind == "null":
        return row[e[1]] is None
    if kind == "starts":
        value = row[e[1]]
        return None if value is None else value.startswith(e[2])
    if kind == "not":
        inner = truth(e[1], row)
        return None if inner is None else not inner
    a, b = truth(e[1], row), truth(e[2], row)
    if kind == "and":
        return False if a is False or b is False else (None if a is None or b is None else True)
    return True if a is True or b is True else (None if a is None or b is None else False)


# -- the model test ---------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[KeyKind, dict[str, Any], bool, list[Step], list[Expr]]:
    kind = draw(st.sampled_from(KEY_KINDS))
    properties, steps = draw(evolving_table(kind))
    steps.append(("commit", draw(operations(kind))))
    chosen = draw(st.lists(exprs(kind), min_size=1, max_size=2))
    return kind, properties, draw(st.booleans()), steps, chosen


def play(
    catalog: firn.Catalog, scenario: tuple[KeyKind, dict[str, Any], bool, list[Step], Any]
) -> tuple[firn.Table, dict[int, dict[Any, Row]]]:
    """Run the steps; the model's view at every snapshot."""
    kind, properties, partitioned, steps, _ = scenario
    schema = table_schema(kind)
    table = catalog.create_table(
        f"spark_read_{next(_names)}",
        schema,
        ["part", "k"],
        ["part"] if partitioned else [],
        properties,
    )
    model = ReferenceModel()
    views = {table.current_snapshot(): model.view()}
    for action, arg in steps:
        if action == "commit":
            table.commit(as_change_set(arg, schema))
            model.apply(arg)
        elif action == "buckets":
            table.set_properties({"change.buckets": arg[0], "base.buckets": arg[1]})
        else:
            summary = firn.compact(table, kind=arg[0], engine=arg[1])
            assert summary["failed_attempts"] == 0, summary["errors"]
        views[table.current_snapshot()] = model.view()
    return table, views


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios(), data=st.data())
def test_spark_reads_equal_the_model(
    spark: SparkSession,
    settings: FirnSettings,
    shared_catalog: firn.Catalog,
    scenario: tuple[KeyKind, dict[str, Any], bool, list[Step], list[Expr]],
    data: st.DataObject,
) -> None:
    table, views = play(shared_catalog, scenario)
    latest = table.current_snapshot()
    df = load(spark, settings, table.name)
    assert df.columns == table.schema.names
    assert as_view(arrow(df)) == views[latest]

    # An older snapshot, read after the compactions that followed it.
    older = data.draw(st.sampled_from(sorted(views)), label="snapshot")
    assert as_view(arrow(load(spark, settings, table.name, snapshot=older))) == views[older]

    # firn.spark.read: compacted splits by Spark's Parquet reader, the rest merged.
    native = firn.spark.read(spark, table.name, **connection(settings))
    assert native.columns == table.schema.names
    assert as_view(arrow(native)) == views[latest]
    at_older = firn.spark.read(spark, table.name, snapshot=older, **connection(settings))
    assert as_view(arrow(at_older)) == views[older]

    # Filters: Spark's, pushed into the Python source's scan (a fresh DataFrame per
    # query, see firn.spark.reader), and on the DataFrame loaded without pushdown: the
    # JVM merge reader where it takes the table (its splits pruned by the filters,
    # which Spark applies to the rows), else the Python source with Spark filtering.
    for e in scenario[4]:
        expected = {k: r for k, r in views[latest].items() if truth(e, r) is True}
        pushed = load(spark, settings, table.name, pushdown="true").where(to_column(e))
        assert as_view(arrow(pushed)) == expected, e
        assert as_view(arrow(df.where(to_column(e)))) == expected, e

    # The change rows between two snapshots equal Table.changes.
    start, end = sorted(data.draw(st.lists(st.sampled_from(sorted(views)), min_size=2, max_size=2)))
    changes = load(spark, settings, table.name, start_snapshot=start, end_snapshot=end)
    assert changes.columns == [*table.schema.names, "_op", "_seq", "_ord"]
    got = arrow(changes).sort_by([("_seq", "ascending"), ("_ord", "ascending")])
    assert got.to_pylist() == table.changes(start, end).to_arrow().to_pylist()


# -- the JVM merge reader ------------------------------------------------------------


def merged_by_jvm(df: DataFrame) -> bool:
    """Whether the DataFrame's plan reads splits with the JVM merge reader."""
    return f"BatchScan {jvm.FORMAT}" in df._jdf.queryExecution().executedPlan().toString()


def scan_of(df: DataFrame) -> str:
    """The DataFrame's physical plan, where the merge reader's scan says how many of
    the plan's columns it reads (``firn-merge(N tasks, C of T columns)``)."""
    return str(df._jdf.queryExecution().executedPlan().toString())


JVM_KEY_KINDS = ("int64", "int32", "string", "binary", "date", "timestamp", "decimal")
"""The key kinds of KEY_KINDS the JVM reader takes (firn.spark.jvm.jvm_key_type)."""

WIDE_DECIMAL = KeyKind("decimal38", pa.decimal128(38, 0), lambda n: Decimal((n - 8) * 10**25 + n))
"""A decimal key Spark holds as bytes, not a long (KEY_KINDS' decimal has 12 digits): values
past 64 bits, negative ones among them (their high lane all ones)."""


def jvm_splits(name: str, options: dict[str, str], **read: Any) -> int:
    """How many splits of a read the JVM reader takes (firn.spark.jvm.jvm_mergeable)."""
    plan = firn.spark.native.plan_read(name, **read, **options)
    return sum(jvm.jvm_mergeable(s, plan.schema_id) for s in plan.merging)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from([*(k for k in KEY_KINDS if k.name in JVM_KEY_KINDS), WIDE_DECIMAL]),
    table=st.data(),
    data=st.data(),
)
def test_the_jvm_reader_merges_as_the_model(
    spark: SparkSession,
    settings: FirnSettings,
    shared_catalog: firn.Catalog,
    kind: KeyKind,
    table: st.DataObject,
    data: st.DataObject,
) -> None:
    """Partitioned tables keyed (part, k) with an integer, date, timestamp, string,
    binary or decimal k (12 digits, which Spark holds as a long, and 38, as bytes):
    every split that merges
    goes to the JVM reader (files at several tree levels, a small commit's files at
    the partition's root, same-commit delete-then-insert, deletion vectors, minor
    compactions' change files with rows of their own seq), at the latest snapshot
    and an older one, all columns and a few without the key."""
    assert jvm.loaded(spark), "the JVM merge reader's jar is not built (make setup)"
    properties, steps = table.draw(evolving_table(kind))
    steps.append(("commit", table.draw(operations(kind))))
    played, views = play(shared_catalog, (kind, properties, True, steps, []))
    options = connection(settings)
    latest = played.current_snapshot()
    older = data.draw(st.sampled_from(sorted(views)), label="snapshot")
    for snapshot in (latest, older):
        df = firn.spark.read(spark, played.name, snapshot=snapshot, **options)
        assert merged_by_jvm(df) == (jvm_splits(played.name, options, snapshot=snapshot) > 0)
        assert as_view(arrow(df)) == views[snapshot]
    few = firn.spark.read(spark, played.name, columns=["qty", "label"], **options)
    assert few.columns == ["qty", "label"]
    expected = Counter((r["qty"], r["label"]) for r in views[latest].values())
    assert Counter((r.qty, r.label) for r in few.collect()) == expected


ONE_KEY_TABLE = {
    "base.buckets": 4,
    "change.split-rows": 100,
    "deletion-vectors.max-ratio": 0.9,
    "deletion-vectors.min-file-bytes": 1,
}
"""Tables keyed by one column for the JVM reader: 4 base nodes, a small commit's files at
the root, compactions that leave deletion vectors."""


def test_the_jvm_reader_on_a_table_keyed_by_one_column(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    """Unpartitioned, keyed by one int32 column: a load, a small commit (its files at
    the root, read by every split), a large one split by node, a compaction that
    leaves deletion vectors, then more changes; every read by the JVM reader."""
    schema = pa.schema(
        [
            pa.field("k", pa.int32(), nullable=False),
            pa.field("v", pa.string()),
            pa.field("x", pa.float64()),
        ]
    )
    table = shared_catalog.create_table(
        f"jvm_one_key_{next(_names)}",
        schema,
        ["k"],
        properties=ONE_KEY_TABLE,
    )
    model = {k: (f"v{k}", k / 2) for k in range(0, 3000)}
    table.load(rows(schema, model))
    options = connection(settings)

    def commit(upserts: dict[int, tuple[Any, ...]], deletes: list[int]) -> None:
        commit_kvx(table, model, upserts, deletes)

    def check() -> None:
        df = firn.spark.read(spark, table.name, **options)
        assert merged_by_jvm(df)
        assert {r.k: (r.v, r.x) for r in df.collect()} == model
        whole = load(spark, settings, table.name)  # format("firn"): the same reader
        assert merged_by_jvm(whole)
        assert {r.k: (r.v, r.x) for r in whole.collect()} == model
        # Columns pruned: the key read for the merge but not returned, or not read at all
        # in a split with nothing to merge.
        assert Counter(r.v for r in whole.select("v").collect()) == Counter(
            v for v, _ in model.values()
        )
        assert Counter(tuple(r) for r in whole.select("x", "v").collect()) == Counter(
            (x, v) for v, x in model.values()
        )
        assert whole.count() == len(model)

    commit({5: ("five", None), 4000: ("new", 1.0)}, [6, 7, 99999])  # small: at the root
    check()
    commit({k: (f"w{k}", None) for k in range(0, 3000, 7)}, list(range(1, 3000, 11)))  # by node
    check()
    firn.compact(table, kind="major", engine="local")
    assert any(f["deletion_vector"] for f in table.files().to_pylist())
    check()  # nothing to merge: base files and their deletion vectors
    commit({6: ("back", 6.0)}, [8])
    check()
    # Insert files larger than a batch: ~35k rows a node (read a batch at a time, the
    # winners of earlier batches copied), then ~5k (each read as one batch, all held).
    commit({k: (f"big{k}", float(k)) for k in range(0, 140_000, 1)}, [])
    commit({k: (f"mid{k}", None) for k in range(0, 40_000, 2)}, list(range(1, 40_000, 20)))
    check()

    # A change file that is not what the catalog recorded is named, never read.
    entries = files_at(catalog_conn(table), table.table_id, table.current_snapshot())
    damaged = max((e for e in entries if e.store == "change"), key=lambda e: e.seq)
    with open(table.storage.full_path(damaged.path), "ab") as file:
        file.write(b"!")
    with pytest.raises(Exception, match=f"{damaged.path} is .* bytes, its catalog entry"):
        firn.spark.read(spark, table.name, **options).collect()


@pytest.mark.parametrize("key_type", [pa.string(), pa.binary()], ids=["string", "binary"])
def test_the_jvm_reader_on_a_table_keyed_by_bytes(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog, key_type: pa.DataType
) -> None:
    """String keys, ASCII and not (their UTF-8 bytes order them, as Firn sorts them), or
    binary keys, some not UTF-8 at all (their bytes order them): a load, a small commit
    at the root, one split by node, a compaction that leaves deletion vectors, more
    changes; every read by the JVM reader, and a lookup pruned."""
    binary = pa.types.is_binary(key_type)
    schema = pa.schema([pa.field("k", key_type, nullable=False), pa.field("v", pa.int64())])
    table = shared_catalog.create_table(
        f"jvm_bytes_key_{next(_names)}",
        schema,
        ["k"],
        properties=ONE_KEY_TABLE,
    )

    def name(i: int) -> Any:
        # Long enough that the writer's dictionary fills early and most base pages are
        # plain: the reader then compares keys in the batch's bytes (InPlaceStrings).
        # A quarter share their first 18 bytes, so only the bytes past the 16 the merge
        # reader orders by words (SortedBytes) tell them apart; a quarter are 12 digits,
        # which differ in every byte of both words.
        text = (f"ключ-{i}-é", f"key-{i:06d}-{'x' * 24}", f"{'x' * 18}-{i}", f"{i:012d}")[i % 4]
        if not binary:
            return text
        # Bytes above 0x7f first in a fifth of them, some not UTF-8 at all: compared
        # unsigned, as Firn orders binary keys.
        return (bytes([0xFF, i % 256]) if i % 5 == 0 else b"") + text.encode()

    model = {name(i): i for i in range(60_000)}
    # Binary keys that hold one another as a prefix up to zero bytes, either side of the
    # words' 8 and 16 bytes: zero-padded words alone would take them for one key.
    padded = [
        b"ab",
        b"ab\x00\x00",
        b"y" * 8,
        b"y" * 8 + b"\x00",
        b"z" * 16,
        b"z" * 16 + b"\x00\x00",
    ]
    if binary:
        model.update({k: -1000 - n for n, k in enumerate(padded)})
    table.load(pa.Table.from_pylist([{"k": k, "v": v} for k, v in model.items()], schema))

    def commit(upserts: dict[Any, int], deletes: list[Any]) -> None:
        commit_kv(table, model, upserts, deletes)

    def bytes_of(k: Any) -> Any:
        return bytes(k) if binary else k  # Spark returns a binary as a bytearray

    def check() -> None:
        df = load(spark, settings, table.name)
        assert merged_by_jvm(df)
        assert {bytes_of(r.k): r.v for r in df.collect()} == model
        assert df.count() == len(model)
        # The key not returned: read for the merge alone, in the pages pyarrow's writer
        # left dictionary-encoded or plain.
        assert Counter(r.v for r in df.select("v").collect()) == Counter(model.values())
        probe = name(1234)
        found = df.where(F.col("k") == probe)
        assert {bytes_of(r.k): r.v for r in found.collect()} == (
            {probe: model[probe]} if probe in model else {}
        )
        # Pruned (the splits and files that may hold the key: a small commit's files at
        # the root are every split's), and to the row groups (pages) it may be in.
        scan = scan_of(found)
        assert " of 4 splits, " in scan, scan
        assert "base row groups by eq(k, " in scan, scan

    new_keys = [b"zz-new", "ключ-new".encode(), b"\x80\x00"] if binary else ["zz-new", "ключ-new"]
    absent = b"absent" if binary else "absent"
    commit({name(5): -5, **{k: i for i, k in enumerate(new_keys)}}, [name(6), name(9), absent])
    if binary:  # beside each padded base key, one that only its zero bytes tell apart
        between = [b"ab\x00", b"y" * 8 + b"\x00\x00", b"z" * 16 + b"\x00"]
        commit({k: 7 for k in between}, [b"ab", b"y" * 8, b"z" * 16 + b"\x00\x00"])
    check()
    commit({name(i): -i for i in range(0, 60_000, 7)}, [name(i) for i in range(1, 60_000, 11)])
    check()
    firn.compact(table, kind="major", engine="local")
    assert any(f["deletion_vector"] for f in table.files().to_pylist())
    check()
    commit({name(6): 6, name(1234): 1}, [name(1235)])
    check()


@pytest.mark.parametrize(
    "key_type", [pa.decimal128(12, 2), pa.decimal128(38, 0)], ids=["decimal12", "decimal38"]
)
def test_the_jvm_reader_on_a_table_keyed_by_a_decimal(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog, key_type: pa.DataType
) -> None:
    """Decimal keys, negative and positive, past 64 bits at 38 digits (which Spark holds as
    bytes, not a long): a load, a small commit at the root (each split keeps its own
    node's keys by their hash), one split by node, a compaction that leaves deletion
    vectors, more changes; every read by the JVM reader, equal to the model, and a
    lookup pruned by its decimal literal."""
    schema = pa.schema([pa.field("k", key_type, nullable=False), pa.field("v", pa.int64())])
    table = shared_catalog.create_table(
        f"jvm_decimal_key_{next(_names)}", schema, ["k"], properties=ONE_KEY_TABLE
    )
    scale = Decimal(10) ** (25 if key_type.precision == 38 else 6)

    def key(i: int) -> Decimal:
        # Around zero both ways, so the sign decides the order as often as the digits.
        step = Decimal(i - 30_000) * scale
        return step + Decimal(i % 7) if key_type.scale == 0 else (step + i % 7) / 100

    model = {key(i): i for i in range(60_000)}
    table.load(pa.Table.from_pylist([{"k": k, "v": v} for k, v in model.items()], schema))

    def commit(upserts: dict[Decimal, int], deletes: list[Decimal]) -> None:
        commit_kv(table, model, upserts, deletes)

    def check() -> None:
        df = load(spark, settings, table.name)
        assert merged_by_jvm(df)
        assert {r.k: r.v for r in df.collect()} == model
        assert df.count() == len(model)
        for probe in (key(1234), key(6)):  # Spark still applies a filter it pushed
            found = df.where(F.col("k") == F.lit(probe))
            assert {r.k: r.v for r in found.collect()} == (
                {probe: model[probe]} if probe in model else {}
            )
            scan = scan_of(found)  # the decimal literal pruned the splits
            assert " of 4 splits, " in scan, scan

    commit({key(5): -5, key(29_999): -1, Decimal(0): 0}, [key(6), key(30_001)])  # at the root
    check()
    commit({key(i): -i for i in range(0, 60_000, 7)}, [key(i) for i in range(1, 60_000, 11)])
    check()
    firn.compact(table, kind="major", engine="local")
    assert any(f["deletion_vector"] for f in table.files().to_pylist())
    check()
    commit({key(6): 6, key(1234): 1}, [key(1235), key(59_999)])
    check()


def scan_rows(df: DataFrame) -> int:
    """The rows the scan of an executed DataFrame handed on, before Spark's filters."""
    leaf = df._jdf.queryExecution().executedPlan().collectLeaves().head()
    return int(leaf.metrics().get("numOutputRows").get().value())


@pytest.mark.parametrize(
    ("group_rows", "page_rows"),
    [(64, None), (1024, 16)],
    ids=["row-groups", "pages"],
)
def test_the_jvm_reader_skips_base_rows_no_row_of_a_filter_is_in(
    spark: SparkSession,
    settings: FirnSettings,
    shared_catalog: firn.Catalog,
    monkeypatch: pytest.MonkeyPatch,
    group_rows: int,
    page_rows: int | None,
) -> None:
    """Base files cut into small row groups (or small pages, which Spark's reader skips
    by the files' page index), most with deletion vectors, changes above them: a read
    filtered by the key (one key, IN, ranges), by a value column or a string equals the
    model, its scan says it filters base files, and a lookup hands on a few groups' or
    pages' rows, not the table's. The vector's positions count the rows skipped, so a
    hidden row read as live (or a live one as hidden) fails it."""
    import firn.engine.loading
    import firn.engine.writer

    monkeypatch.setattr(firn.engine.writer, "ROW_GROUP_ROWS", group_rows)
    monkeypatch.setattr(firn.engine.loading, "ROW_GROUP_ROWS", group_rows)
    monkeypatch.setattr(firn.engine.writer, "PAGE_ROWS", page_rows)
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("v", pa.string()),
            pa.field("x", pa.int32()),
        ]
    )
    table = shared_catalog.create_table(
        f"jvm_row_groups_{next(_names)}", schema, ["k"], properties=ONE_KEY_TABLE
    )
    model = {k: (f"v{k:05d}", k % 97) for k in range(0, 6000)}
    table.load(rows(schema, model))

    def commit(upserts: dict[int, tuple[Any, ...]], deletes: list[int]) -> None:
        commit_kvx(table, model, upserts, deletes)

    commit({k: (f"w{k:05d}", 1000 + k) for k in range(0, 6000, 13)}, list(range(3, 6000, 17)))
    firn.compact(table, kind="major", engine="local")
    kept = [
        pq.ParquetFile(table.storage.full_path(f["path"])).metadata
        for f in table.files().to_pylist()
        if f["deletion_vector"]
    ]
    assert kept
    assert min(m.num_row_groups for m in kept) > (2 if page_rows is None else 0)
    assert all(m.row_group(0).column(0).has_column_index for m in kept)
    commit({1234: ("moved", 5), 7000: ("new", 5)}, [1235, 4321])  # changes above the base

    cases: list[tuple[Column, Callable[[int, tuple[Any, ...]], bool]]] = [
        (F.col("k") == 1234, lambda k, r: k == 1234),
        (F.col("k") == 1235, lambda k, r: k == 1235),  # deleted by the last commit
        (F.col("k") == 2600, lambda k, r: k == 2600),  # replaced by the first
        (F.col("k").isin(5, 77, 2999, 5998, 7000), lambda k, r: k in (5, 77, 2999, 5998, 7000)),
        ((F.col("k") >= 1000) & (F.col("k") < 1100), lambda k, r: 1000 <= k < 1100),
        (F.col("k") > 5950, lambda k, r: k > 5950),
        (F.col("k") <= 40, lambda k, r: k <= 40),
        (F.col("x") == 5, lambda k, r: r[1] == 5),
        (F.col("v") == "v04000", lambda k, r: r[0] == "v04000"),
        (F.col("v") < "v00100", lambda k, r: r[0] is not None and r[0] < "v00100"),
    ]
    options = connection(settings)
    for condition, passes in cases:
        expected = {k: r for k, r in model.items() if passes(k, r)}
        df = load(spark, settings, table.name).where(condition)
        assert merged_by_jvm(df)
        assert "base row groups by" in scan_of(df), condition
        assert {r.k: (r.v, r.x) for r in df.collect()} == expected, condition
        # firn.spark.read's merge reader (format firn-merge: its splits are not pruned,
        # its base files' row groups are).
        merged = firn.spark.read(spark, table.name, **options).where(condition)
        assert "base row groups by" in scan_of(merged), condition
        assert {r.k: (r.v, r.x) for r in merged.collect()} == expected, condition
    lookup = load(spark, settings, table.name).where(F.col("k") == 4000)
    assert [r.k for r in lookup.collect()] == [4000]
    # What the scan handed on: the upserts, a group (or page) of each base file the key
    # may be in, never a whole file.
    assert scan_rows(lookup) < 4 * (page_rows or group_rows), scan_rows(lookup)


def test_format_firn_is_the_jvm_reader_where_it_takes_the_whole_read(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    """format("firn") reads the merged view by the JVM merge reader when it takes every
    split (compacted ones and ones that merge, at the latest or a pinned snapshot, all
    columns or some), and leaves the rest to the Python source: filters, pushdown,
    change reads, a key it does not take. Writes in the same session go to the Python
    source, the JVM name in front notwithstanding."""
    assert jvm.loaded(spark), "the JVM merge reader's jar is not built (make setup)"
    table, model = orders(shared_catalog, f"routed_{next(_names)}")
    first = table.current_snapshot()
    df = load(spark, settings, table.name)
    assert merged_by_jvm(df)
    assert keyed(arrow(df)) == model
    few = load(spark, settings, table.name, columns="k,label")
    assert merged_by_jvm(few)
    assert few.columns == ["k", "label"]
    assert Counter(tuple(r) for r in few.collect()) == Counter(
        (r["k"], r["label"]) for r in model.values()
    )
    # Spark prunes the merge reader's columns: a select decodes its columns (the key
    # too, which every merge reads, but does not return it), a count none of them.
    for columns in (["label", "qty"], ["qty", "k"], ["part"], []):
        pruned = df.select(*columns)
        assert f"{len(columns)} of 4 columns" in scan_of(pruned), columns
        assert Counter(tuple(r) for r in pruned.collect()) == Counter(
            tuple(r[c] for c in columns) for r in model.values()
        ), columns
    assert df.count() == len(model)
    assert df.where("qty > 3").select("label").count() == sum(
        1 for r in model.values() if (r["qty"] or 0) > 3
    )

    python_reads = {
        "filter": {"filter": "qty > 3"},
        "pushdown": {"pushdown": "true"},
        "changes": {"start_snapshot": str(first - 1)},
    }
    for what, options in python_reads.items():
        assert not merged_by_jvm(load(spark, settings, table.name, **options)), what
    filtered = load(spark, settings, table.name, filter="qty > 3")
    assert keyed(arrow(filtered)) == {k: r for k, r in model.items() if (r["qty"] or 0) > 3}

    # Written through format("firn") in this session, then read back by the JVM reader.
    added = [{"part": "a", "k": 9000 + i, "qty": i, "label": "new"} for i in range(5)]
    written = spark.createDataFrame(pa.Table.from_pylist(added, schema=ORDERS).to_pandas())
    written.write.format("firn").options(**connection(settings)).mode("append").save(table.name)
    model.update({("a", r["k"]): r for r in added})
    after = load(spark, settings, table.name)
    assert merged_by_jvm(after)
    assert keyed(arrow(after)) == model
    at_first = load(spark, settings, table.name, snapshot=str(first))
    assert merged_by_jvm(at_first)
    assert len(at_first.collect()) == len(model) - len(added)

    # String, binary and decimal keys are the JVM reader's; a millisecond timestamp is
    # not (Spark reads it as microseconds, which hash otherwise): the Python source reads it.
    huge = Decimal(10**37)
    keys: list[tuple[pa.DataType, list[Any], bool]] = [
        (pa.string(), ["x", "y", "z"], True),
        (pa.binary(), [b"x", b"\xff\x00", b"z"], True),
        (pa.decimal128(6, 2), [Decimal("1.50"), Decimal("-2.25"), Decimal("3.00")], True),
        (pa.decimal128(38, 0), [-huge, Decimal(-1), huge], True),
        (pa.timestamp("ms"), [dt.datetime(2024, 1, d) for d in (1, 2, 3)], False),
    ]
    for key_type, (x, y, z), by_jvm in keys:
        schema = pa.schema([pa.field("s", key_type, nullable=False), pa.field("v", pa.int64())])
        keyed_by = shared_catalog.create_table(f"routed_keys_{next(_names)}", schema, ["s"])
        keyed_by.upsert(pa.table({"s": [x, y], "v": [1, 2]}, schema=schema))
        keyed_by.upsert(pa.table({"s": [y, z], "v": [3, 4]}, schema=schema))
        df = load(spark, settings, keyed_by.name)
        assert merged_by_jvm(df) == by_jvm, key_type
        got = {(bytes(r.s) if isinstance(r.s, bytearray) else r.s): r.v for r in df.collect()}
        assert got == {x: 1, y: 3, z: 4}, key_type


def rows(schema: pa.Schema, model: dict[int, tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([{"k": k, "v": v, "x": x} for k, (v, x) in model.items()], schema)


def commit_kvx(
    table: firn.Table,
    model: dict[int, tuple[Any, ...]],
    upserts: dict[int, tuple[Any, ...]],
    deletes: list[int],
) -> None:
    """Commit upserts of (v, x) by k, then deletes of k, to a table of columns k, v, x,
    and apply them to ``model`` in that order (the deletes come later in the change set)."""
    ops = [(k, *v, "U") for k, v in upserts.items()] + [(k, None, None, "D") for k in deletes]
    schema = table.schema
    table.commit(
        pa.Table.from_pylist(
            [{"k": k, "v": v, "x": x, "_op": op} for k, v, x, op in ops],
            pa.schema([*schema, pa.field("_op", pa.string())]),
        )
    )
    model.update(upserts)
    for k in deletes:
        model.pop(k, None)


# -- pruning, columns, SQL, snapshots, bad input ------------------------------------

ORDERS = pa.schema(
    [
        pa.field("part", pa.string(), nullable=False),
        pa.field("k", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("label", pa.string()),
    ]
)


def orders(catalog: firn.Catalog, name: str) -> tuple[firn.Table, dict[Any, Row]]:
    """A compacted table in 3 partitions x 4 nodes, with unmerged changes on top."""
    table = catalog.create_table(
        name, ORDERS, ["part", "k"], ["part"], {"base.buckets": 4, "change.buckets": 4, **HASH_TREE}
    )
    rows = [
        {"part": PARTS[i % 3], "k": i, "qty": i % 7 or None, "label": f"l{i % 5}"}
        for i in range(300)
    ]
    table.upsert(pa.Table.from_pylist(rows, schema=ORDERS))
    firn.compact(table, engine="local")
    later = [{**r, "qty": 1000 + r["k"]} for r in rows[:40]]
    table.upsert(pa.Table.from_pylist(later, schema=ORDERS))
    table.delete(pa.table({"part": ["a", "b"], "k": [3, 4]}))
    model = {(r["part"], r["k"]): r for r in rows + later}
    del model[("a", 3)], model[("b", 4)]
    return table, model


def keyed(table: pa.Table) -> dict[Any, Row]:
    return {(r["part"], r["k"]): r for r in table.to_pylist()}


def test_pushed_filters_prune_splits_and_files(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, model = orders(shared_catalog, f"pruned_{next(_names)}")
    whole = len(table.scan().splits())
    # One split a Spark task (partition_rows 1), so that the tasks count the splits.
    one = {"partition_rows": "1"}
    assert load(spark, settings, table.name, **one).rdd.getNumPartitions() == whole == 12
    assert load(spark, settings, table.name).rdd.getNumPartitions() == 1  # small: packed

    # One partition: its splits only; one whole key: one split.
    for condition, firn_filter, expected_splits in [
        (F.col("part") == "a", "part = 'a'", 4),
        ((F.col("part") == "a") & (F.col("k") == 9), "part = 'a' and k = 9", 1),
        ((F.col("part") == "b") & F.col("k").isin(1, 4, 7), "part = 'b' and k in (1, 4, 7)", None),
    ]:
        scan = table.scan(filter=firn_filter)
        assert expected_splits in (None, len(scan.splits()))
        assert len(scan.splits()) < whole
        expected = keyed(scan.to_arrow())
        assert expected == {k: model[k] for k in expected}
        assert expected
        pushed = load(spark, settings, table.name, pushdown="true", **one).where(condition)
        assert pushed.rdd.getNumPartitions() == len(scan.splits()), firn_filter
        assert keyed(arrow(pushed)) == expected
        # The same filter as a read option.
        given = load(spark, settings, table.name, filter=firn_filter, **one)
        assert given.rdd.getNumPartitions() == len(scan.splits())
        assert keyed(arrow(given)) == expected
        # Without pushdown: the JVM merge reader, which prunes its splits by the same
        # filters and hands them all back to Spark to apply: the same splits and rows.
        plain = load(spark, settings, table.name, **one).where(condition)
        assert merged_by_jvm(plain)
        assert plain.rdd.getNumPartitions() == len(scan.splits()), firn_filter
        assert f"{len(scan.splits())} of {whole} splits," in scan_of(plain)
        assert keyed(arrow(plain)) == expected

    # Each query of a DataFrame prunes by its own filters: the same DataFrame read
    # without one reads every split (the Python source's pushdown cannot promise that).
    df = load(spark, settings, table.name, **one)
    assert keyed(arrow(df.where(F.col("part") == "a"))) == {
        k: r for k, r in model.items() if k[0] == "a"
    }
    assert df.rdd.getNumPartitions() == whole
    assert keyed(arrow(df)) == model
    # A filter that prunes nothing (an OR; a key range every split spans), or one
    # partition, by a date or string test: pruned as far as it goes, rows exact.
    for condition, passes, splits in [
        ((F.col("part") == "a") | (F.col("k") == 5), lambda p, k: p == "a" or k == 5, whole),
        (F.col("k") >= 0, lambda p, k: k >= 0, whole),
        (F.col("part").startswith("c"), lambda p, k: p.startswith("c"), 4),
        (F.col("part").isin("a", "c") & ~(F.col("part") == "a"), lambda p, k: p == "c", 4),
    ]:
        filtered = df.where(condition)
        assert filtered.rdd.getNumPartitions() == splits, condition
        assert keyed(arrow(filtered)) == {k: r for k, r in model.items() if passes(*k)}

    # What the pushed filters became, and the files they keep (the scan's explain).
    schema = read_schema({"path": table.name, **connection(settings)})
    reader = firn_reader({"path": table.name, "pushdown": "true", **connection(settings)}, schema)
    odd = sds.StringEndsWith(("label",), "3")
    kept = reader.pushFilters(
        [sds.EqualTo(("part",), "a"), sds.EqualTo(("k",), 9), sds.EqualTo(("x", "y"), 1), odd]
    )
    assert len(kept) == 1  # the nested column only
    assert [str(f) for f in reader.filters[:2]] == ["part = 'a'", "k = 9"]
    partitions = reader.partitions()
    assert all(isinstance(p, SplitPartition) for p in partitions)
    files = {e.path for p in partitions for s in p.splits for e in s.files}  # type: ignore[attr-defined]
    report = table.scan(filter="part = 'a' and k = 9").explain()
    assert len(files) == report.files_kept < report.files


def test_filters_keep_a_split_whose_rows_a_filtered_scan_places_deeper(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    """Base files at 4 nodes, unmerged changes at 2: the plan's splits are the 2 nodes.
    A filtered scan of one key whose change file's key range excludes it keeps only a
    base file, at its own deeper node; the JVM reader keeps the planned split that
    holds that node, not only one of the same node, and reads only that base file."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = shared_catalog.create_table(
        f"jvm_deeper_{next(_names)}",
        schema,
        ["k"],
        properties={"base.buckets": 4, "change.buckets": 2, "change.split-rows": 0},
    )
    model = {k: f"v{k}" for k in range(1000)}
    table.load(pa.Table.from_pylist([{"k": k, "v": v} for k, v in model.items()], schema))
    changed = {k: f"w{k}" for k in range(10)}
    table.upsert(pa.Table.from_pylist([{"k": k, "v": v} for k, v in changed.items()], schema))
    model.update(changed)
    assert len(table.scan().splits()) == 2
    assert {s.node.m for s in table.scan(filter="k = 500").splits()} == {4}

    df = load(spark, settings, table.name, partition_rows="1")
    assert merged_by_jvm(df)
    for condition, passes in [
        (F.col("k") == 500, lambda k: k == 500),
        (F.col("k").isin(3, 500, 999), lambda k: k in (3, 500, 999)),
        (F.col("k") > 990, lambda k: k > 990),
    ]:
        assert {r.k: r.v for r in df.where(condition).collect()} == {
            k: v for k, v in model.items() if passes(k)
        }, condition
    # One split kept, and of its files only the base file that can hold the key: the
    # change file's key range (0-9) excludes it.
    assert df.where(F.col("k") == 500).rdd.getNumPartitions() == 1
    assert "1 of 2 splits, 1 of 6 files" in scan_of(df.where(F.col("k") == 500))


def test_sql_on_a_temporary_view(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, model = orders(shared_catalog, f"viewed_{next(_names)}")
    load(spark, settings, table.name).createOrReplaceTempView("firn_orders")
    got = spark.sql(
        "SELECT part, count(*) AS n, sum(qty) AS total FROM firn_orders "
        "WHERE qty > 3 AND label LIKE 'l%' GROUP BY part ORDER BY part"
    ).collect()
    expected = []
    for part in PARTS:
        rows = [r for r in model.values() if r["part"] == part and (r["qty"] or 0) > 3]
        expected.append((part, len(rows), sum(r["qty"] for r in rows)))
    assert [tuple(r) for r in got] == expected
    # A filtered query, then an unfiltered one on the same view: each gets its rows
    # (with pushdown, Spark 4.3 would hand the second the first one's plan).
    point = spark.sql("SELECT * FROM firn_orders WHERE part = 'c' AND k = 2").toArrow()
    assert keyed(point) == {("c", 2): model[("c", 2)]}
    assert spark.sql("SELECT count(*) FROM firn_orders").collect()[0][0] == len(model)


def test_columns_are_chosen_by_option_or_schema(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, model = orders(shared_catalog, f"columns_{next(_names)}")
    expected = sorted((r["k"], r["qty"]) for r in model.values())
    by_option = load(spark, settings, table.name, columns="k,qty")
    assert by_option.columns == ["k", "qty"]
    assert sorted(tuple(r) for r in by_option.collect()) == expected
    by_schema = (
        spark.read.format("firn").options(**connection(settings)).schema("k bigint, qty bigint")
    ).load(table.name)
    assert sorted(tuple(r) for r in by_schema.collect()) == expected
    # Only those columns (and the key, for the merge) are read from the files.
    reader = firn_reader(
        {"path": table.name, **connection(settings)}, StructType.fromDDL("k bigint, qty bigint")
    )
    assert reader.columns == ("k", "qty")
    with firn.connect(settings=settings) as catalog:
        assert reader.plan(catalog.table(table.name)).columns == ("k", "qty")
    wrong = spark.read.format("firn").options(**connection(settings)).schema("k string")
    with pytest.raises(Exception, match="reads as bigint, not string"):
        wrong.load(table.name).collect()


def test_a_snapshot_read_during_a_compaction(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, model = orders(shared_catalog, f"during_{next(_names)}")
    before = table.current_snapshot()
    options = {"path": table.name, **connection(settings)}
    reader = firn_reader(options, read_schema(options))
    partitions = reader.partitions()  # planned: the files of `before`
    summary = firn.compact(table, engine="local")
    assert summary["plans"], summary
    assert table.current_snapshot() > before
    # The planned splits still read `before`, whose files the compaction replaced.
    replaced = {e.path for p in partitions for s in p.splits for e in s.files}  # type: ignore[attr-defined]
    assert replaced - set(table.files().column("path").to_pylist())
    rows = [b for p in partitions for b in reader.read(p)]
    assert keyed(pa.Table.from_batches(rows)) == model
    assert keyed(arrow(load(spark, settings, table.name, snapshot=before))) == model
    assert keyed(arrow(load(spark, settings, table.name))) == model


def test_executors_skip_the_rows_a_deletion_vector_hides(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, model = orders(shared_catalog, f"vectors_{next(_names)}")
    before = table.current_snapshot()
    for entry in base_entries(table)[:3]:
        positions = [0, entry.record_count - 1]
        for row in rows_at(table, entry, positions):
            if row["k"] >= 40:  # keys below 40 have newer change rows, which stay
                model.pop((row["part"], row["k"]), None)
        hide_rows(table, entry, positions)
    assert keyed(arrow(load(spark, settings, table.name))) == model
    assert keyed(table.read()) == model
    older = keyed(arrow(load(spark, settings, table.name, snapshot=before)))
    assert older == keyed(table.read(snapshot=before))
    assert len(older) > len(model)


def scans(df: DataFrame) -> tuple[bool, bool]:
    """Whether the executed plan reads Parquet natively, and through the firn source."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return "FileScan parquet" in plan, "PythonDataSource" in plan or "BatchScan" in plan


def test_native_read_hands_compacted_splits_to_spark(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, model = orders(shared_catalog, f"native_{next(_names)}")
    options = connection(settings)
    # Unmerged changes over most splits: those merge in the firn source.
    plan = firn.spark.native.plan_read(table.name, **options)
    assert plan.merging
    assert keyed(arrow(firn.spark.read(spark, table.name, **options))) == model

    # Fully compacted: every split native.
    firn.compact(table, kind="full", engine="local")
    plan = firn.spark.native.plan_read(table.name, **options)
    assert plan.native
    assert not plan.merging
    df = firn.spark.read(spark, table.name, **options)
    assert scans(df) == (True, False)
    assert keyed(arrow(df)) == model == keyed(table.read())
    assert_listed_by_the_driver(spark, table.name, options)

    # A deletion vector on a base file, and one change: those two splits merge in
    # the firn source, the others stay native; one snapshot for both.
    entry = base_entries(table)[0]
    (row,) = rows_at(table, entry, [0])
    hide_rows(table, entry, [0])
    model.pop((row["part"], row["k"]))
    compacted = dict(model)
    changed = next(k for k in model if k[0] != row["part"])
    table.upsert(pa.Table.from_pylist([{**model[changed], "qty": -1}], ORDERS))
    model[changed] = {**model[changed], "qty": -1}
    plan = firn.spark.native.plan_read(table.name, **options)
    assert len(plan.merging) == 2
    assert plan.native
    df = firn.spark.read(spark, table.name, **options)
    assert scans(df) == (True, True)
    assert keyed(arrow(df)) == model

    # Columns, Spark's filters, and an older snapshot.
    few = firn.spark.read(spark, table.name, columns=["k", "part"], **options)
    assert few.columns == ["k", "part"]
    assert sorted(r.k for r in few.where(F.col("part") == "b").collect()) == sorted(
        k for (p, k) in model if p == "b"
    )
    older = firn.spark.read(spark, table.name, snapshot=plan.snapshot - 1, **options)
    assert keyed(arrow(older)) == compacted

    with pytest.raises(ConfigError, match=r"filter with \.where"):
        firn.spark.read(spark, table.name, filter="k = 1", **options)
    with pytest.raises(Exception, match="option splits must be all, merging or python"):
        load(spark, settings, table.name, splits="some").collect()


def assert_listed_by_the_driver(spark: SparkSession, name: str, options: dict[str, str]) -> None:
    """More base files than the session's parallel-listing threshold: building the
    read's DataFrame starts no Spark job to list them, and the setting is kept."""
    threshold = firn.spark.native.LISTING_THRESHOLD
    spark.conf.set(threshold, "4")  # the table has 12 base files
    group = f"firn-listing-{next(_names)}"
    try:
        spark.sparkContext.setJobGroup(group, "building a native read")
        firn.spark.read(spark, name, **options)
        assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
        assert spark.conf.get(threshold) == "4"
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        spark.conf.unset(threshold)


def test_a_loaded_dataframe_reads_the_snapshot_of_its_first_query(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, model = orders(shared_catalog, f"pinned_{next(_names)}")
    df = load(spark, settings, table.name)
    assert df.count() == len(model)
    table.delete(pa.table({"part": ["c"], "k": [2]}))
    assert df.count() == len(model)
    assert load(spark, settings, table.name).count() == len(model) - 1


def test_bad_input_gets_a_clear_error(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog
) -> None:
    table, _ = orders(shared_catalog, f"bad_{next(_names)}")
    with pytest.raises(Exception, match="no table named 'nope'"):
        load(spark, settings, "nope")
    with pytest.raises(Exception, match="UNRESOLVED_COLUMN"):
        load(spark, settings, table.name, pushdown="true").where(F.col("nope") == 1).collect()
    with pytest.raises(Exception, match="unknown column 'nope'"):
        load(spark, settings, table.name, filter="nope = 1").collect()
    with pytest.raises(Exception, match="snapshot id"):
        load(spark, settings, table.name, snapshot="latest").collect()
    with pytest.raises(Exception, match="unknown columns"):
        load(spark, settings, table.name, columns="k,nope")
    # With no retention only the current snapshot is kept: the first one expires.
    table.set_properties({"snapshot.retention": 0})
    firn.compact(table, engine="local")
    expire(shared_catalog.conn, table.name)
    with pytest.raises(Exception, match="expired"):
        load(spark, settings, table.name, snapshot=1).collect()
    with pytest.raises(Exception, match="expired"):
        load(spark, settings, table.name, start_snapshot=1).collect()


def test_reads_are_planned_on_a_kept_catalog_that_outlives_its_connection(
    spark: SparkSession, settings: FirnSettings, shared_catalog: firn.Catalog, db: Any
) -> None:
    """Reads planned one after another take the catalog the one before kept
    (``firn.spark.catalogs``); when Postgres ends that catalog's session while it is
    idle (a restart, an idle timeout), the next read opens another and reads the same."""
    table, model = orders(shared_catalog, f"kept_{next(_names)}")
    options = connection(settings)
    first = firn.spark.native.plan_read(table.name, **options)
    kept = [c for _, c in catalogs._idle if c.settings.database_schema == settings.database_schema]
    assert len(kept) == 1
    pid = kept[0].conn.info.backend_pid
    again = firn.spark.native.plan_read(table.name, **options)
    assert again == first
    assert kept[0].conn.info.backend_pid == pid  # the same session: nothing opened
    db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert firn.spark.native.plan_read(table.name, **options) == first
    assert load(spark, settings, table.name).count() == len(model)
    now = [c for _, c in catalogs._idle if c.settings.database_schema == settings.database_schema]
    assert [c.conn.info.backend_pid for c in now] != [pid]
