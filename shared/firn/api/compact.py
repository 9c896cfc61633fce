"""``firn.compact``: plan, execute and commit synchronously, in this process, through
exactly the steps the services take (SPEC 10): the planner's draft is persisted with
the state check, tasks are released and claimed through the task state machine,
executed as one Spark job (or locally), recorded, retried up to
``task.max-attempts``, and each plan is committed in its own transaction.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from firn.api.catalog import postgres_catalog_of
from firn.catalog.claiming import claim_tasks, release_tasks
from firn.catalog.compactions import PlanCommit, commit_plan
from firn.catalog.results import record_results, retry_backoff
from firn.engine.execution import Claim, run_local, run_spark
from firn.engine.kernel import KernelLimits
from firn.engine.planning import plan_now
from firn.engine.policies import Scope
from firn.errors import ConfigError
from firn.model.partition_names import PartitionName, partition_keys
from firn.model.plans import PlanRecord, PlanSkipped
from firn.model.schema import TableSchema
from firn.model.states import PlanOutcome, PlanState
from firn.model.tasks import Kind, TaskResult
from firn.postgres.connection import Connection
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
    bounded step at a time);
    tables without a primary key bin-pack small files whatever the kind. ``engine="local"`` runs
    the merge kernel in this process instead of as a Spark job.

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
    partitions = _partitions(conn, table, partition)

    plans: list[PlanRecord] = []
    skipped: list[PlanSkipped] = []
    # "auto" asks what the metrics service would: the kind the partition's triggers
    # call for (none: nothing to do), planned unit by unit as the planner service does.
    due = {p["partition"]: p["due"] for p in table.status()["partitions"]} if kind == "auto" else {}
    for part in partitions:
        planned = due.get(part) if kind == "auto" else kind
        if planned is None:
            continue
        scope: Scope = "due" if kind == "auto" else "all"
        record = plan_now(
            conn, table, part, Kind(planned), reason={"trigger": "manual"}, scope=scope
        )
        if isinstance(record, PlanSkipped):
            skipped.append(record)
        elif record is not None:
            release_tasks(conn, record)
            plans.append(record)

    owner = f"compact-{os.getpid()}"
    pending = [t.task_id for p in plans for t in p.tasks]
    results: list[TaskResult] = []
    limits = KernelLimits.from_settings(catalog.settings)
    while pending:
        claims = claim_tasks(conn, pending, owner, props.task_lease)
        batch = _execute(catalog.settings, table, claims, limits, engine, spark)
        results.extend(batch)
        outcomes = record_results(conn, batch, props.task_max_attempts)
        retries = [r for r, o in zip(batch, outcomes, strict=True) if o == "retry"]
        pending = [r.task_id for r in retries]
        if retries:
            # Claims are refused until the backoff has passed (as the services wait).
            time.sleep(max(retry_backoff(r.attempt) for r in retries))

    commits = [_commit(conn, p.plan_id) for p in plans]
    return _summary(table, kind, plans, skipped, commits, results, time.monotonic() - started)


def _commit(conn: Connection, plan_id: int) -> PlanCommit:
    """Commit the plan, unless one of its tasks failed it (retries used up, or an
    error not worth retrying such as a damaged input file): then report that, with
    the first line of the plan's error, which names the task and the file."""
    row = conn.execute(
        "SELECT state, error FROM compaction_plan WHERE plan_id = %s", (plan_id,)
    ).fetchone()
    if row is not None and row[0] == PlanState.FAILED:
        reason = (row[1] or "").strip().splitlines()
        return PlanCommit(plan_id, PlanOutcome.FAILED, reason=reason[0] if reason else "")
    return commit_plan(conn, plan_id)


def _partitions(
    conn: Connection, table: Table, partition: PartitionName | Iterable[PartitionName] | None
) -> list[str]:
    known = [
        p
        for (p,) in conn.execute(
            "SELECT partition_key FROM catalog_partition WHERE table_id = %s "
            "ORDER BY partition_key",
            (table.table_id,),
        ).fetchall()
    ]
    if partition is None:
        return known
    return existing_partitions(table.definition, partition, known)


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


def _execute(
    settings: FirnSettings,
    table: Table,
    claims: list[Claim],
    limits: KernelLimits,
    engine: Engine,
    spark: SparkSession | None,
) -> list[TaskResult]:
    if engine == "local":
        return run_local(table.definition, claims, limits)
    if spark is None:
        from firn.engine.spark_session import spark_session

        spark = spark_session(settings)
    return run_spark(spark, table.definition, claims, limits)


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
