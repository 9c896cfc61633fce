"""Which pending tasks one dispatcher runs next (issue 15: score-first, with permits).

The dispatcher's wake-up (any plan-task event) asks the catalog for the claimable
tasks, highest plan priority first; this picks the batch it runs:

- the first candidate decides the table of a Spark job (a job runs one table's
  tasks);
- then tasks in priority order while the batch stays within
  ``dispatcher.max-concurrent-tasks`` and the memory budget, each task reserving its
  estimate (``task_memory``) before it starts;
- a task whose estimate alone passes the budget runs alone, never beside others;
- a batch whose first task reads at most ``dispatcher_local_bytes`` stays one the
  dispatcher runs in its own processes (``firn.engine.execution.run_small_here``):
  others join it only while it reads no more than that in all. Otherwise eight small
  folds of 1-2 MiB together pass it and pay a Spark job's fixed cost instead (1-3 s
  each on two cores, while every other plan waited; bench/HISTORY.md, "Folding at every
  cycle"); the rest run in the next batch. Such a batch may take other tables'
  tasks (issue 37): on a fleet of small tables a wake-up's own cost (its catalog
  round trips, its events) is then paid once for several tables, not per table.

Pure: the catalog query and the claims are the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MiB = 1 << 20
DECODED_PER_STORED_BYTE = 4
"""Parquet inputs take about this many bytes in Arrow once decoded (zstd, dictionaries;
LZ4 files, a third larger, decode to less per stored byte: the estimate errs high)."""
WRITER_AND_READER_BYTES = 64 * MiB
"""The base read window and the writer's row groups, whatever the task's size."""


@dataclass(frozen=True)
class Candidate:
    """A claimable task, in the order the catalog gave it (highest score first)."""

    task_id: int
    table_id: int
    input_bytes: int
    score: float


def task_memory(input_bytes: int, spill_budget: int) -> int:
    """A task's memory estimate: its decoded change rows, at most what the kernel
    holds before it spills (``FIRN_EXECUTOR_MEMORY_BUDGET``), plus fixed buffers."""
    return min(input_bytes * DECODED_PER_STORED_BYTE, spill_budget) + WRITER_AND_READER_BYTES


def choose_batch(
    candidates: Sequence[Candidate],
    max_tasks: int,
    memory_budget: int,
    spill_budget: int,
    local_bytes: int = 0,
) -> list[Candidate]:
    """The tasks to claim now, in the candidates' order (empty if there are none).
    ``local_bytes`` 0: no batch is kept local."""
    if not candidates:
        return []
    first = candidates[0]
    batch = [first]
    reserved = task_memory(first.input_bytes, spill_budget)
    if reserved > memory_budget:
        return batch  # too big to share the executor with anything
    local = local_bytes > 0 and first.input_bytes <= local_bytes
    reads = first.input_bytes
    for c in candidates[1:]:
        if len(batch) >= max_tasks:
            break
        need = task_memory(c.input_bytes, spill_budget)
        if (c.table_id != first.table_id and not local) or reserved + need > memory_budget:
            continue
        if local and reads + c.input_bytes > local_bytes:
            continue
        batch.append(c)
        reserved += need
        reads += c.input_bytes
    return batch
