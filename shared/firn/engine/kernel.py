"""The merge kernel: run one compaction task over its input files (design §6).

Vectorised Arrow throughout; no Python loop touches rows. For a keyed task:

1. change rows are read file by file, keeping only this plan's rows (seq in
   ``(from_merged_seq, S]``, per row when a file stores ``_seq``), this task's node
   (rows of files at shallower nodes are hashed) and key range; they are reduced to
   one row per key and sorted, spilling to disk past the memory budget
   (``firn.engine.runs``);
2. base files are grouped into runs of disjoint files in key order and streamed batch
   by batch, filtered the same way, without the rows their deletion vectors hide
   (``firn.io.deletion_vectors``); with ``TaskSpec.vector_ratio`` set, base files the
   changes barely touch are kept instead, with a vector (``firn.engine.vectors``);
3. the runs are merged window by window: per key the greatest LSN wins, winning
   deletes drop the key (major) or are kept (minor: change files only, written back
   as one insert and one delete file that keep each row's ``_seq`` and ``_ord``);
4. the output is written sorted and cut at ``target-file-size``
   (``firn.engine.writer``) under a path unique to the task and attempt.

The inputs are read by ``firn.engine.inputs``. A major task of a wide table
(``TaskSpec.vertical_group``) runs steps 1-3 on its key columns only and then moves
its value columns a group at a time (``firn.engine.vertical``). Unkeyed tables only
bin-pack: the input files are streamed into full-sized files.
The kernel takes a ``TaskSpec`` and returns a ``TaskResult``, so it runs the same in
a Spark task, in a test, or in a benchmark.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from firn.engine.inputs import TaskInputs
from firn.engine.runs import (
    DEL,
    SortedRun,
    SpillDir,
    SpillStats,
    drop_deletes,
    resolve,
    spill_runs,
    windows,
)
from firn.engine.scan import change_schema
from firn.engine.vectors import BaseChoice, choose_base, may_keep
from firn.engine.vertical import merge_vertical
from firn.engine.writer import SizedWriter
from firn.errors import FirnError
from firn.io.storage import Storage
from firn.model.keyorder import bound_scalars, count_below
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, TaskResult, TaskSpec, moved_output

if TYPE_CHECKING:
    # Settings are resolved on the driver: this module runs in Spark's Python workers,
    # which have no pydantic (see firn.engine.shipping).
    from firn.settings import FirnSettings

DEFAULT_MEMORY_BUDGET = 1 << 30


@dataclass(frozen=True)
class KernelLimits:
    """How much memory a task may hold and where it spills the rest."""

    memory_budget: int = DEFAULT_MEMORY_BUDGET
    spill_dir: str | None = None

    @classmethod
    def from_settings(cls, settings: FirnSettings) -> KernelLimits:
        spill_dir = settings.executor_spill_dir
        return cls(settings.executor_memory_budget, None if spill_dir is None else str(spill_dir))


def run_task(
    table: TableSchema, spec: TaskSpec, attempt: int, limits: KernelLimits | None = None
) -> TaskResult:
    """Run one attempt of one task; outputs are written, not yet registered. The
    table's definition is the spec's own when it carries one (its plan's schema
    version); ``table`` is for specs planned before they did."""
    limits = limits or KernelLimits()
    started = time.monotonic()
    table = task_definition(table, spec)
    storage = Storage(spec.location)
    if spec.move and table.keyed:
        checked = TaskInputs(storage, table, spec)
        if checked.movable():
            return TaskResult(
                task_id=spec.task_id,
                attempt=attempt,
                outputs=tuple(moved_output(f, spec) for f in spec.change_files),
                rows_read=checked.rows_read,
                rows_written=0,
                seconds=time.monotonic() - started,
            )
    writers = _writers(storage, table, spec, attempt)
    reader = TaskInputs(storage, table, spec)
    stats = SpillStats()
    choice = BaseChoice(rewrite=list(spec.base_files))
    try:
        if table.keyed:
            if any(may_keep(spec, f) for f in spec.base_files):
                choice = choose_base(
                    storage, table, spec, attempt, reader.change_keys(limits.memory_budget)
                )
            with SpillDir(limits.spill_dir, f"firn-task-{spec.task_id}-") as spill_dir:
                if spec.vertical_group and spec.kind == "major":
                    merge_vertical(reader, choice.rewrite, writers[0], spill_dir)
                else:
                    _merge(
                        table,
                        reader,
                        choice.rewrite,
                        writers,
                        limits.memory_budget,
                        spill_dir,
                        stats,
                    )
        else:
            for batch in reader.all_rows():
                writers[0].write(batch)
        outputs = [o for w in writers for o in w.close()] + choice.kept
    except BaseException:
        for w in writers:
            w.abort()
        for path in choice.written:
            storage.delete(path)
        raise
    return TaskResult(
        task_id=spec.task_id,
        attempt=attempt,
        outputs=tuple(outputs),
        rows_read=reader.rows_read,
        rows_written=sum(w.rows_written for w in writers),
        seconds=time.monotonic() - started,
        spilled_runs=stats.runs_on_disk,
    )


def task_definition(table: TableSchema, spec: TaskSpec) -> TableSchema:
    """The definition ``spec`` is run with, checked to read every input: a file
    written under a newer version than the plan's would lose the values of columns the
    plan's version lacks (a plan made under version N must never drop a column added
    in N + 1), so such a task fails for good and the partition is planned again."""
    definition = table if spec.table is None else TableSchema.from_dict(spec.table)
    known = definition.versions()
    for f in (*spec.base_files, *spec.change_files):
        if f.schema_id > definition.schema_id or f.schema_id not in known:
            raise FirnError(
                f"input {f.path} was written under schema version {f.schema_id}, but the "
                f"task was planned under version {definition.schema_id}: plan it again",
                retryable=False,
            )
    return definition


def _writers(
    storage: Storage, table: TableSchema, spec: TaskSpec, attempt: int
) -> list[SizedWriter]:
    """One base writer; or, for minor compaction, an insert and a delete writer whose
    files keep each row's ``_ord`` and ``_seq`` (so the merge rule still holds)."""

    def writer(schema: pa.Schema, file_type: str) -> SizedWriter:
        return SizedWriter(
            storage,
            spec.output_dir(attempt),
            schema=schema,
            node=spec.node,
            seq=spec.to_seq,
            target_size=spec.target_file_size,
            key_columns=table.primary_key,
            file_type=file_type,
            compression=spec.compression,
        )

    if spec.kind != "minor":
        return [writer(table.schema, "B")]
    return [writer(change_schema(table, "I"), "I"), writer(change_schema(table, "D"), "D")]


def _merge(
    table: TableSchema,
    reader: TaskInputs,
    base_files: Sequence[InputFile],
    writers: list[SizedWriter],
    memory_budget: int,
    spill_dir: SpillDir,
    stats: SpillStats,
) -> None:
    key = list(table.primary_key)
    change_runs = spill_runs(
        reader.change_rows(), table, reader.schema, memory_budget, spill_dir, stats
    )
    base_runs = [
        SortedRun(reader.base_rows(run), table) for run in reader.base_file_runs(base_files)
    ]
    cuts = [bound_scalars(c, table.key_schema) for c in reader.spec.cut_before]
    pool = pa.default_memory_pool()
    for n, parts in enumerate(windows([*base_runs, *change_runs])):
        if n % 8 == 7:
            # The pool keeps freed buffers for reuse; past the budget that is
            # resident memory nobody uses, so hand it back now and then.
            pool.release_unused()
        winners = resolve(parts, key)
        if len(writers) == 1:
            rows = drop_deletes(winners).select(table.schema.names)
            # Cut before an untouched file of the node (windows come in key order).
            while cuts and rows.num_rows and count_below(rows, key, cuts[0]) < rows.num_rows:
                head = count_below(rows, key, cuts.pop(0))
                writers[0].write(rows.slice(0, head))
                writers[0].cut()
                rows = rows.slice(head)
            writers[0].write(rows)
            continue
        # Minor: a winning delete must stay, to hide the key's base row later.
        deleted = winners.column(DEL)
        upserts, deletes = writers
        upserts.write(winners.filter(pc.invert(deleted)).select(upserts.schema.names))
        deletes.write(winners.filter(deleted).select(deletes.schema.names))
