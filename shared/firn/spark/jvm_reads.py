"""``spark.read.format("firn")`` read by the JVM merge reader when it can take the whole read.

The jar registers a JVM source under the ``firn`` name (``org.firn.spark.FirnSource``),
which Spark finds before the Python source of the same name. On the driver it asks this
module, through a Py4J callback that ``firn.spark.register`` installs, for the read's
plan: ``jvm_plan`` answers with the plan ``firn.spark.read`` gives the merge reader when
every split of the read is one the merge reader takes (``firn.spark.jvm.jvm_mergeable``:
compacted splits too, which it streams past an empty set of changes), and with None
otherwise. None hands the read to the Python source unchanged, as do writes, stream
sinks, change reads (``start_snapshot``), filters and pushdown.

Why: a Python source hands each row to Spark through Arrow, which alone costs about what
Iceberg's Spark connector takes for the whole read (``bench/README.md``, "Spark users");
the merge reader reads the files inside the executors' JVM.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from firn.spark import jvm
from firn.spark.native import plan_read
from firn.spark.reader import SETTINGS, packed, read_options, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PLAIN_OPTIONS = frozenset(
    {"path", "table", "snapshot", "columns", "partition_rows", "splits", "pushdown", *SETTINGS}
)
"""A read with only these options is one the merge reader may take (``splits`` ``all``,
``pushdown`` false): the merged view, all of it or some columns, at a snapshot."""


def jvm_plan(options: Mapping[str, str]) -> str | None:
    """The merge reader's plan (``org.firn.spark.ReadPlan``'s JSON) for a ``format("firn")``
    read with ``options``, or None when the Python source is to read it: other options, an
    empty table, or a split the merge reader does not take."""
    if not set(options) <= PLAIN_OPTIONS:
        return None
    opts = read_options(options)
    if opts.changes or opts.filter or opts.pushdown or opts.splits != "all":
        return None
    plan = plan_read(opts.table, snapshot=opts.snapshot, columns=opts.columns, **opts.settings)
    splits = [*plan.native, *plan.merging]
    if not splits or not all(jvm.jvm_mergeable(s, plan.schema_id) for s in splits):
        return None
    tasks = packed(splits, opts.partition_rows)
    return jvm.read_plan(tasks, plan.schema, lambda s: json.loads(spark_schema(s).json()))


class ReadPlanner:
    """The Py4J callback ``FirnSource`` asks on the driver (``FirnSource.Planner``)."""

    def plan(self, options: str) -> str | None:
        try:
            return jvm_plan(json.loads(options))
        except Exception:
            # The Python source plans the same read again and raises what is wrong
            # (a missing table, a bad option) in Spark's usual way.
            log.debug("format('firn') read left to the Python source", exc_info=True)
            return None

    class Java:
        implements: ClassVar[list[str]] = ["org.firn.spark.FirnSource$Planner"]


def install(spark: SparkSession) -> bool:
    """Answer ``spark``'s ``FirnSource`` from this process: whether it was installed (the
    session has the jar and a JVM this process drives)."""
    if not jvm.loaded(spark):
        return False
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    source = spark._jvm.org.firn.spark.FirnSource  # type: ignore[union-attr]
    source.plannedBy(ReadPlanner())
    return True
