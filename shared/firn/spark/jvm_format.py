"""``format("firn")`` by the JVM: reads the merge reader can take whole, loads the JVM
loader can write.

The jar registers a JVM source under the ``firn`` name (``org.firn.spark.FirnSource``),
which Spark finds before the Python source of the same name. On the driver it asks this
module, through a Py4J callback that ``firn.spark.register`` installs, for the read's
plan: ``jvm_plan`` answers with the plan ``firn.spark.read`` gives the merge reader when
every split of the read is one the merge reader takes (``firn.spark.jvm.jvm_mergeable``:
compacted splits too, which it streams past an empty set of changes), and with None
otherwise. None hands the read to the Python source unchanged, as do stream sinks,
change reads (``start_snapshot``) and the ``filter`` and ``pushdown`` options. When a
query's Spark filters reach the merge reader, it asks ``jvm_prune`` which of the
plan's splits and files can hold a passing row.

A batch ``df.write.format("firn").mode("overwrite")`` (a load) asks ``jvm_load``: when the
JVM loader can write the rows as they come (``firn.spark.load.start_load``: the
DataFrame's columns are the table's by name and type, in any order), the load's
directory is staged and the loader writes it; the JVM then hands the files back
(``jvm_loaded``) to be registered as one load, or says the job failed
(``jvm_discarded``) and the directory goes. Appends and every other write are the
Python source's.

Why: a Python source hands each row to Spark through Arrow, which alone costs about what
Iceberg's Spark connector takes for a whole read or load (``bench/README.md``, "Spark
users"); the merge reader and the loader work inside the executors' JVM.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from firn.model.filters import conjunction
from firn.model.tree import ROOT, Node
from firn.spark import jvm
from firn.spark.catalogs import table_for_read
from firn.spark.hadoop import hadoop_uri, reaches
from firn.spark.load import finish_load, load_plan, start_load
from firn.spark.native import plan_read
from firn.spark.pushdown import Unsupported, convert, from_jvm
from firn.spark.reader import SETTINGS, packed, read_options, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from firn.spark.options import WriteOptions
    from firn.spark.tasks import WriteJob

log = logging.getLogger(__name__)

PLAIN_OPTIONS = frozenset(
    {"path", "table", "snapshot", "columns", "partition_rows", "splits", "pushdown", *SETTINGS}
)
"""A read with only these options is one the merge reader may take (``splits`` ``all``,
``pushdown`` false): the merged view, all of it or some columns, at a snapshot."""


def jvm_plan(options: Mapping[str, str], reachable: Callable[[str], bool]) -> str | None:
    """The merge reader's plan (``org.firn.spark.ReadPlan``'s JSON) for a ``format("firn")``
    read with ``options``, or None when the Python source is to read it: other options, an
    empty table, a split the merge reader does not take, or files the session has no
    file system for (``reachable``: ``firn.spark.hadoop.reaches`` for its session)."""
    if not set(options) <= PLAIN_OPTIONS:
        return None
    opts = read_options(options)
    if opts.changes or opts.filter or opts.pushdown or opts.splits != "all":
        return None
    plan = plan_read(opts.table, snapshot=opts.snapshot, columns=opts.columns, **opts.settings)
    splits = [*plan.native, *plan.merging]
    if not splits or not all(jvm.jvm_mergeable(s, plan.schema_id) for s in splits):
        return None
    if not reachable(splits[0].location):  # a table's splits share its location
        return None
    tasks = packed(splits, opts.partition_rows)
    return jvm.read_plan(
        tasks, plan.schema, lambda s: json.loads(spark_schema(s).json()), plan.snapshot
    )


def jvm_prune(
    options: Mapping[str, str],
    snapshot: int,
    splits: Sequence[Sequence[Any]],
    filters: Sequence[Mapping[str, Any]],
) -> dict[str, list[Any]] | None:
    """Which of a merge reader's planned ``splits`` (``[partition, m, i]`` each: its
    partition and hash node) can hold a row passing Spark's pushed ``filters``
    (``firn.spark.pushdown.from_jvm``'s form), and which of their files: ``{"splits":
    [index, ...], "files": [uri, ...]}``; None when no filter is one Firn prunes with.

    The answer is the scan of the same snapshot with those filters (``Table.scan``:
    partitions, the hash nodes of whole keys, key ranges). Its files are the ones that
    can hold a passing row's key; a planned split keeps those of its files, and is
    kept when its node and a kept split's overlap (a filtered scan may place a
    partition's kept files at a deeper node than the plan did). A merge of only those
    files is exact for every key the filters pass, and Spark applies every filter again
    after the scan, dropping the other keys: this only saves reading. What prunes is a
    keyed table's partition and key columns, never floating point (Firn refuses them),
    so Spark's ordering of NaN, which Arrow's comparisons do not share, never meets it."""
    opts = read_options(options)
    with table_for_read(opts.settings, opts.table) as handle:
        schema = handle.definition_at(snapshot).schema
        converted = []
        for data in filters:
            try:
                found = convert(from_jvm(data), schema)
            except (Unsupported, KeyError, TypeError, ValueError):
                found = None  # a form this side does not know: Spark alone applies it
            if found is not None:
                converted.append(found)
        if not converted:
            return None
        scan = handle.scan(filter=conjunction(converted), snapshot=snapshot)
    kept: dict[str, list[Node]] = {}
    files: set[str] = set()
    for split in scan.splits():
        kept.setdefault(split.partition or "", []).append(split.node or ROOT)
        files.update(hadoop_uri(split.location, e.path) for e in split.files)
    return {
        "splits": [
            index
            for index, (partition, m, i) in enumerate(splits)
            if any(Node(int(m), int(i)).overlaps(node) for node in kept.get(partition, ()))
        ],
        "files": sorted(files),
    }


_loads: dict[str, tuple[WriteJob, WriteOptions]] = {}
"""Loads the JVM loader is writing, by their plan's token, until ``loaded``/``discarded``."""
_loads_lock = threading.Lock()


def jvm_load(
    options: Mapping[str, str], schema: str, reachable: Callable[[str], bool]
) -> str | None:
    """The JVM loader's plan (``org.firn.spark.LoadPlan``'s JSON) for a ``format("firn")``
    overwrite of rows of ``schema`` (a Spark ``StructType``'s JSON), its directory staged;
    None when the Python source is to write it."""
    from pyspark.sql.types import StructType

    rows = StructType.fromJson(json.loads(schema))
    started = start_load(dict(options), rows, reachable, exact=True)
    if started is None:
        return None
    token = uuid.uuid4().hex
    with _loads_lock:
        _loads[token] = started
    return load_plan(started[0], token)


def jvm_loaded(token: str, files: str) -> None:
    """Register the files the load of ``token`` wrote (the loader's JSON) as one load."""
    with _loads_lock:
        job, opts = _loads.pop(token)
    finish_load(job, opts, files)


def jvm_discarded(token: str) -> None:
    """The load of ``token`` failed: delete its staged directory and record."""
    from firn.spark.jobs import abort_job

    with _loads_lock:
        found = _loads.pop(token, None)
    if found is not None:
        abort_job(found[0], found[1], [])


class ReadPlanner:
    """The Py4J callback ``FirnSource`` asks on the driver (``FirnSource.Planner``), for
    the session it was installed in."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark

    def _reaches(self, location: str) -> bool:
        return reaches(self._spark, location)

    def plan(self, options: str) -> str | None:
        try:
            return jvm_plan(json.loads(options), self._reaches)
        except Exception:
            # The Python source plans the same read again and raises what is wrong
            # (a missing table, a bad option) in Spark's usual way.
            log.debug("format('firn') read left to the Python source", exc_info=True)
            return None

    def prune(self, options: str, snapshot: int, splits: str, filters: str) -> str | None:
        try:
            kept = jvm_prune(json.loads(options), snapshot, json.loads(splits), json.loads(filters))
        except Exception:
            # Pruning only saves work: Spark applies the filters itself anyway.
            log.warning("format('firn') read not pruned by its filters", exc_info=True)
            return None
        return None if kept is None else json.dumps(kept)

    def load(self, options: str, schema: str) -> str | None:
        try:
            return jvm_load(json.loads(options), schema, self._reaches)
        except Exception:
            # As for plan: the Python source checks the write again and says what is wrong.
            log.debug("format('firn') load left to the Python source", exc_info=True)
            return None

    def loaded(self, token: str, files: str) -> None:
        # Raised into the JVM, which fails the write (and discards the load).
        jvm_loaded(token, files)

    def discarded(self, token: str) -> None:
        jvm_discarded(token)

    class Java:
        implements: ClassVar[list[str]] = ["org.firn.spark.FirnSource$Planner"]


def install(spark: SparkSession) -> bool:
    """Answer ``spark``'s ``FirnSource`` from this process; whether ``FirnSource`` is in
    front of the Python source (the session has the jar and a JVM this process drives),
    so that the Python source must be registered as ``firn-python``. If the callback
    cannot be served (its server does not start), ``FirnSource`` hands every call to the
    Python source: slower, never wrong."""
    if not jvm.loaded(spark):
        return False
    from pyspark.java_gateway import ensure_callback_server_started

    try:
        gateway = spark.sparkContext._gateway
        ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
        source = spark._jvm.org.firn.spark.FirnSource  # type: ignore[union-attr]
        source.plannedBy(ReadPlanner(spark))
    except Exception:
        log.warning(
            'format("firn") cannot call back into this process: every read and write '
            "goes through the Python source",
            exc_info=True,
        )
    return True
