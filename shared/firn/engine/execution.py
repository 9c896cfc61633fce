"""Running claimed tasks: a batch of tasks is one Spark job, one Spark task per plan
task (design §6), or, for tests, tools and batches too small to be worth a Spark job
(``run_small_here``), the same kernel in the dispatcher's worker processes or in
this process.

Spark ships each task's spec (JSON) and the table definition to a Python worker,
which runs the merge kernel and sends back a ``TaskResult`` as JSON: the output
files' stats, or the error. The worker imports this module, and what it imports,
from the zip ``firn.engine.shipping`` adds to the session: on a cluster it has no
Firn of its own, only pyspark, pyarrow and numpy. A failing task is reported, not
raised, so one bad task does not fail its batch; retrying is the state machine's
business, not Spark's.
"""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from firn.engine.kernel import KernelLimits, run_task
from firn.engine.shipping import ship_firn
from firn.errors import FirnError
from firn.model.schema import TableSchema
from firn.model.tasks import TaskResult, TaskSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Claim = tuple[TaskSpec, int]
"""A task spec and the attempt this executor owns."""
Runner = Callable[[TableSchema, Sequence[Claim], KernelLimits], list[TaskResult]]


def run_reporting(
    table: TableSchema, limits: KernelLimits, spec: TaskSpec, attempt: int
) -> TaskResult:
    """Run one attempt; an error becomes a failed result (with its traceback tail),
    retryable unless it is a ``FirnError`` that says otherwise (a damaged input file)."""
    try:
        return run_task(table, spec, attempt, limits)
    except Exception as exc:  # reported to the state machine, which decides on retries
        detail = "".join(traceback.format_exception(exc, limit=-3))
        log.warning("task %s attempt %s failed: %s", spec.task_id, attempt, exc)
        # An error that is not Firn's own (a bug, an unexpected library error) keeps
        # the old behaviour: it is retried up to task.max-attempts.
        retryable = exc.retryable if isinstance(exc, FirnError) else True
        return TaskResult(
            task_id=spec.task_id,
            attempt=attempt,
            error=f"{exc!r}\n{detail}",
            retryable=retryable,
        )


def run_local(
    table: TableSchema, claims: Sequence[Claim], limits: KernelLimits, threads: int = 1
) -> list[TaskResult]:
    """The tasks in this process, on up to ``threads`` threads at once (pyarrow's
    reads, sorts and writes release the GIL, so a second core does merge work), the
    results in claim order. The batch's memory was reserved for all its tasks at once
    (``firn.model.permits``), as for a Spark job, so running them together is within it."""
    if threads <= 1 or len(claims) <= 1:
        return [run_reporting(table, limits, spec, attempt) for spec, attempt in claims]
    with ThreadPoolExecutor(min(threads, len(claims)), thread_name_prefix="firn-merge") as pool:
        return list(pool.map(lambda c: run_reporting(table, limits, *c), claims))


def _run_serialized(table: TableSchema, limits: KernelLimits, item: tuple[str, int]) -> str:
    spec_json, attempt = item
    result = run_reporting(table, limits, TaskSpec.from_json(spec_json), attempt)
    return result.to_json()


def run_spark(
    session: SparkSession, table: TableSchema, claims: Sequence[Claim], limits: KernelLimits
) -> list[TaskResult]:
    """The tasks as one Spark job with one Spark task each."""
    if not claims:
        return []
    ship_firn(session)
    context = session.sparkContext
    context.setJobDescription(f"firn: {len(claims)} compaction task(s) of {table.name}")
    payload = [(spec.to_json(), attempt) for spec, attempt in claims]
    job = context.parallelize(payload, numSlices=len(payload)).map(
        functools.partial(_run_serialized, table, limits)
    )
    return [TaskResult.from_json(r) for r in job.collect()]


def batch_input_bytes(claims: Sequence[Claim]) -> int:
    return sum(f.size_bytes for spec, _ in claims for f in (*spec.base_files, *spec.change_files))


def run_small_here(runner: Runner, local_bytes: int, local: Runner | None = None) -> Runner:
    """``runner`` for batches reading more than ``local_bytes`` in all, ``local`` for
    the others (the dispatcher's merge workers, ``firn.engine.worker_pool``; by
    default ``run_local`` in this process). A Spark job costs a fixed few hundred
    milliseconds (scheduling, shipping the spec to a Python worker and the result
    back) that a merge of a few MiB does not: at ten commits a second the tiered
    policy's many small run merges would spend more time there than merging, and reads
    wait for them. 0: always ``runner``."""

    def run(table: TableSchema, claims: Sequence[Claim], limits: KernelLimits) -> list[TaskResult]:
        if batch_input_bytes(claims) <= local_bytes:
            return (local or run_local)(table, claims, limits)
        return runner(table, claims, limits)

    return run
