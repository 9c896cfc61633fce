"""``firn.compact``: plan, execute and commit synchronously, in this process, through
the steps the services take (``firn.engine.compaction``): the policy's draft is
stored with the state check, tasks are released and claimed through the task state
machine, executed as one Spark job (or locally), recorded, retried up to
``task.max-attempts``, and the table's plans are committed together, in one
transaction and one snapshot (each plan still checked, and failing, on its own).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from firn.api.catalog import postgres_catalog_of
from firn.catalog.compactions import PlanCommit
from firn.catalog.files import partitions_of
from firn.engine import compaction
from firn.engine.execution import Runner, run_local, run_spark
from firn.engine.kernel import KernelLimits
from firn.engine.policies import Scope
from firn.errors import ConfigError
from firn.model.partition_names import PartitionName, partition_keys
from firn.model.plans import PlanRecord, PlanSkipped
from firn.model.schema import TableSchema
from firn.model.tasks import Kind, TaskResult
from firn.settings import FirnSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from firn.api.table import Table

Engine = Literal["spark", "local"]


def compact(
    table: Table,
    partition: PartitionName | Iterable[PartitionName] | None = None,
    kind: str = "major",
    *,
    engine: Engine = "spark",
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """Compact ``table`` (the named partitions, or every one) now; returns a summary.

    ``partition`` names one partition by its key (``"region=eu"``, Hive-style
    ``"region=eu/day=2024-01-31"`` for several columns) or by a mapping of every
    partition column to a value (``{"region": "eu"}``), or several as a list of
    those; a partition the table does not have is a ``ConfigError``.

    ``kind`` is ``major`` (fold the unmerged changes into the base), ``full`` (also
    rewrite every base file, e.g. after changing ``base.buckets``), ``minor``
    (merge each node's change files among themselves; the base is untouched) or
    ``auto`` (what the services do: the kind the partition's triggers call for, if
    any, planned unit by unit: each unit folds, merges its newest sorted runs, or is
    left alone on its own numbers, and misplaced base files are re-bucketed a
    bounded step at a time); tables without a primary key bin-pack their small files
    (``full``: every file). ``engine="local"`` runs the merge kernel in this process
    instead of as a Spark job.

    ``spark`` is a session the caller already has, on any master: the job runs there
    (Firn ships its own code to the executors, which need only pyspark, pyarrow and
    numpy). Without it Firn builds one from the settings (``FIRN_SPARK_MASTER``,
    ``FIRN_SPARK_CONF``)."""
    if kind not in ("major", "full", "minor", "auto"):
        raise ConfigError(f"kind must be 'major', 'minor', 'full' or 'auto', got {kind!r}")
    if engine not in ("spark", "local"):
        raise ConfigError(f"engine must be 'spark' or 'local', got {engine!r}")
    if spark is not None and engine != "spark":
        raise ConfigError(f"a Spark session was given, but engine is {engine!r}")
    started = time.monotonic()
    catalog = postgres_catalog_of(table)
    conn = catalog.conn
    props = table.properties
    known = partitions_of(conn, table.table_id)
    partitions = (
        known if partition is None else existing_partitions(table.definition, partition, known)
    )

    plans: list[PlanRecord] = []
    skipped: list[PlanSkipped] = []
    # "auto" asks what the metrics service would: the kind the partition's triggers
    # call for (none: nothing to do), planned unit by unit as the planner service does.
    due = {p["partition"]: p["due"] for p in table.status()["partitions"]} if kind == "auto" else {}
    scope: Scope = "due" if kind == "auto" else "all"
    for part in partitions:
        planned = due.get(part) if kind == "auto" else kind
        if planned is None:
            continue
        record = compaction.plan(
            conn, table, part, Kind(planned), scope=scope, reason={"trigger": "manual"}
        )
        if isinstance(record, PlanSkipped):
            skipped.append(record)
        elif record is not None:
            compaction.release(conn, record)
            plans.append(record)

    results = compaction.run_to_results(
        catalog.db,
        table.definition,
        [t.task_id for p in plans for t in p.tasks],
        _runner(catalog.settings, engine, spark),
        KernelLimits.from_settings(catalog.settings),
        owner=f"compact-{os.getpid()}",
        lease=props.task_lease,
        max_attempts=props.task_max_attempts,
    )
    # The table's plans commit together: one transaction and one snapshot.
    commits = compaction.settle_all(conn, [p.plan_id for p in plans])
    return _summary(table, kind, plans, skipped, commits, results, time.monotonic() - started)


def existing_partitions(
    table: TableSchema, names: PartitionName | Iterable[PartitionName], known: Iterable[str]
) -> list[str]:
    """The keys of the named partitions of ``table``, each checked to be one of ``known``."""
    keys = list(partition_keys(table, names))
    have = sorted(known)
    missing = [k for k in keys if k not in have]
    if missing:
        raise ConfigError(
            f"table {table.name!r} has no partition {missing[0]!r} (it has {have[:10]})"
        )
    return keys


def _runner(settings: FirnSettings, engine: Engine, spark: SparkSession | None) -> Runner:
    """The merge kernel in this process, or one Spark job per batch on ``spark`` (a
    session built from the settings when None)."""
    if engine == "local":
        return run_local
    if spark is None:
        from firn.engine.spark_session import spark_session

        spark = spark_session(settings)
    return functools.partial(run_spark, spark)


def _summary(
    table: Table,
    kind: str,
    plans: list[PlanRecord],
    skipped: list[PlanSkipped],
    commits: list[PlanCommit],
    results: list[TaskResult],
    seconds: float,
) -> dict[str, Any]:
    by_plan = {c.plan_id: c for c in commits}
    return {
        "table": table.name,
        "kind": kind,
        "seconds": round(seconds, 3),
        "plans": [
            {
                "plan_id": p.plan_id,
                "partition": p.tasks[0].partition_key if p.tasks else None,
                "tasks": len(p.tasks),
                "input_files": sum(len(t.base_files) + len(t.change_files) for t in p.tasks),
                "input_bytes": sum(t.input_bytes for t in p.tasks),
                "outcome": by_plan[p.plan_id].outcome.value,
                "snapshot": by_plan[p.plan_id].snapshot_id,
                "removed_files": by_plan[p.plan_id].removed_files,
                "added_files": by_plan[p.plan_id].added_files,
                "added_bytes": by_plan[p.plan_id].added_bytes,
                "added_rows": by_plan[p.plan_id].added_rows,
                "kept_files": by_plan[p.plan_id].kept_files,
                "vector_files": by_plan[p.plan_id].vector_files,
                "reason": by_plan[p.plan_id].reason,
            }
            for p in plans
        ],
        "skipped": [{"partition": s.partition_key, "reason": s.reason} for s in skipped],
        "attempts": len(results),
        "failed_attempts": sum(not r.ok for r in results),
        "errors": [r.error.splitlines()[0] for r in results if r.error][:5],
    }
