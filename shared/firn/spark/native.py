"""A Firn table read by Spark's own Parquet reader wherever nothing needs merging:
``firn.spark.read(spark, "orders")``.

Why: every row ``spark.read.format("firn")`` returns is read by pyarrow in a Python
worker, sent to the JVM as Arrow and turned into Spark rows there. For a split that
merges (unmerged change files over base files) that is the price of the merge, but a
compacted partition's split is only its base files' live rows, which Spark's
vectorised Parquet reader reads on its own, with its column pruning and filter
pushdown, and on executors that have no Python at all.

What ``read`` builds, at one snapshot (the latest unless ``snapshot`` is given):

- the splits ``natively_readable`` accepts (no unmerged change file, every file of the
  current schema version, column types Spark's Parquet reader reads as the source
  would, no deletion vector) become one ``spark.read.parquet`` of their base files:
  local files, or an object store's through the session's Hadoop connector
  (``firn.spark.hadoop``; a session without the connector reads every split with
  the source);
- the splits that merge go to the JVM merge reader (``firn.spark.jvm``) when the
  session has its jar and ``jvm_mergeable`` accepts them;
- the other splits are read by the ``firn`` source with option ``splits=merging``
  (``python`` when the JVM reader takes some; it plans the same scan and keeps
  exactly those, ``firn.spark.handoff.kept``), pinned to the same snapshot;
- the parts are one DataFrame (``unionByName``).

Filters: apply them with ``.where`` on the result. Spark pushes them into its Parquet
scan of the native part; the ``firn`` part gets them as any read without pushdown
does (the rows are right, read unpruned). The driver's process reaches the catalog
(to plan the read), as ``firn.spark.register`` does.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from firn.engine.splits import Split
from firn.errors import ConfigError
from firn.spark import hadoop, jvm
from firn.spark.handoff import MERGING, PYTHON, natively_readable
from firn.spark.reader import (
    PARTITION_ROWS,
    SETTINGS,
    ReadOptions,
    packed,
    read_options,
    spark_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
DEFAULT_LISTING_THRESHOLD = 32


@dataclass(frozen=True)
class ReadPlan:
    """What ``read`` reads, and how."""

    table: str
    snapshot: int
    schema: pa.Schema
    """The columns returned."""
    native: tuple[Split, ...]
    merging: tuple[Split, ...]
    schema_id: int = 0
    """The schema version the read is of."""


def plan_read(
    table: str,
    *,
    snapshot: int | None = None,
    columns: Sequence[str] | None = None,
    **options: str,
) -> ReadPlan:
    """The splits of a read of ``table``, parted into those Spark reads natively and
    those the ``firn`` source merges. ``options``: the catalog settings a ``firn``
    read takes (``database_url``, ``database_schema``, ``warehouse``)."""
    opts = _options(table, snapshot, columns, options)
    from firn.spark.catalogs import table_for_read
    from firn.spark.reader import _chosen

    with table_for_read(opts.settings, opts.table) as handle:
        scan = handle.scan(columns=opts.columns, snapshot=opts.snapshot)
        definition = handle.definition_at(scan.snapshot)
        splits = scan.splits()
    native: list[Split] = []
    merging: list[Split] = []
    for split in splits:
        (native if natively_readable(split, definition.schema_id) else merging).append(split)
    return ReadPlan(
        table=opts.table,
        snapshot=scan.snapshot,
        schema=_chosen(definition, opts),
        native=tuple(native),
        merging=tuple(merging),
        schema_id=definition.schema_id,
    )


def read(
    spark: SparkSession,
    table: str,
    *,
    snapshot: int | None = None,
    columns: Sequence[str] | None = None,
    **options: str,
) -> DataFrame:
    """The merged view of ``table`` as a DataFrame, compacted splits read by Spark's
    Parquet reader, the rest by the ``firn`` source (``firn.spark.register(spark)``
    first). ``columns``: the columns to return (default: all); ``snapshot``: an older
    snapshot; ``options``: catalog settings, as ``format("firn")`` takes them."""
    plan = plan_read(table, snapshot=snapshot, columns=columns, **options)
    schema = spark_schema(plan.schema)
    splits = (*plan.native, *plan.merging)
    if splits and not hadoop.reaches(spark, splits[0].location):
        # The session cannot open the table's files (an object store without its
        # Hadoop connector): the firn source reads them all, with pyarrow.
        return _source_rows(spark, plan, options, "all")
    parts = []
    if plan.native:
        parts.append(_native_rows(spark, plan, schema))
    python = plan.merging
    if plan.merging and jvm.loaded(spark):
        merged_by_jvm = [s for s in plan.merging if jvm.jvm_mergeable(s, plan.schema_id)]
        python = tuple(s for s in plan.merging if s not in merged_by_jvm)
        if merged_by_jvm:
            parts.append(_jvm_rows(spark, plan, merged_by_jvm))
    if python or not parts:
        # The firn source plans the same snapshot and keeps the splits no other part
        # reads, by the same rule (firn.spark.handoff.kept).
        which = MERGING if python is plan.merging else PYTHON
        parts.append(_source_rows(spark, plan, options, which))
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def _source_rows(
    spark: SparkSession, plan: ReadPlan, options: dict[str, str], splits: str
) -> DataFrame:
    """The rows of the splits the ``firn`` source keeps with option ``splits`` (all,
    merging, python: ``firn.spark.handoff.kept``), at the plan's snapshot."""
    reader = spark.read.format("firn").options(**_settings(options))
    reader = reader.option("snapshot", str(plan.snapshot)).option("splits", splits)
    return reader.option("columns", ",".join(plan.schema.names)).load(plan.table)


def _options(
    table: str, snapshot: int | None, columns: Sequence[str] | None, options: dict[str, str]
) -> ReadOptions:
    unknown = sorted(set(options) - set(SETTINGS))
    if unknown:
        raise ConfigError(
            f"firn.spark.read takes the catalog settings {list(SETTINGS)} as options, not "
            f"{unknown}: filter with .where(...) on the DataFrame, read changes with "
            'spark.read.format("firn").option("start_snapshot", ...)'
        )
    given: dict[str, str] = {"path": table, **_settings(options)}
    if snapshot is not None:
        given["snapshot"] = str(snapshot)
    if columns is not None:
        if isinstance(columns, str) or not columns:
            raise ConfigError("columns must be a non-empty list of column names")
        given["columns"] = ",".join(columns)
    return read_options(given)


def _settings(options: dict[str, str]) -> dict[str, str]:
    return {k: str(v) for k, v in options.items() if k in SETTINGS}


def _jvm_rows(spark: SparkSession, plan: ReadPlan, splits: Sequence[Split]) -> DataFrame:
    """The rows of ``splits``, merged by the JVM reader, several small splits a task
    as the ``firn`` source packs them."""
    tasks = packed(splits, PARTITION_ROWS)
    text = jvm.read_plan(
        tasks, plan.schema, lambda s: json.loads(spark_schema(s).json()), plan.snapshot
    )
    return spark.read.format(jvm.FORMAT).option("plan", text).load()


def _native_rows(spark: SparkSession, plan: ReadPlan, schema: Any) -> DataFrame:
    """The native splits' rows: their base files, read by Spark."""
    paths = [
        hadoop.hadoop_uri(split.location, e.path)
        for split in plan.native
        for e in split.files
        if e.store == "base"
    ]
    with _listed_by_the_driver(spark, len(paths)):
        rows = spark.read.schema(schema).parquet(*paths)
    return rows.select(*plan.schema.names)


@contextlib.contextmanager
def _listed_by_the_driver(spark: SparkSession, paths: int) -> Iterator[None]:
    """Spark lists more than ``parallelPartitionDiscovery.threshold`` paths (32 by
    default) with a Spark job of its own, as if each were a directory to walk. Firn
    passes files it already knows, so the driver stats them itself: 160 files of a
    5M-row table's changes took 1.59 s to become a DataFrame by that job and 0.38 s
    without it. The session's setting is raised for the call and put back."""
    given = spark.conf.get(LISTING_THRESHOLD, None)
    if paths <= int(given or DEFAULT_LISTING_THRESHOLD):
        yield
        return
    spark.conf.set(LISTING_THRESHOLD, str(paths))
    try:
        yield
    finally:
        if given is None:
            spark.conf.unset(LISTING_THRESHOLD)
        else:
            spark.conf.set(LISTING_THRESHOLD, given)
