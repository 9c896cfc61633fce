"""The merge kernel: run one compaction task over its input files (SPEC 6).

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

Unkeyed tables only bin-pack: the input files are streamed into full-sized files.
The kernel takes a ``TaskSpec`` and returns a ``TaskResult``, so it runs the same in
a Spark task, in a test, or in a benchmark.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firn.engine.runs import (
    DEL,
    SortedRun,
    SpillDir,
    SpillStats,
    drop_deletes,
    resolve,
    spill_runs,
    windows,
    work_schema,
)
from firn.engine.scan import change_schema, stored_schema
from firn.engine.vectors import BaseChoice, choose_base, may_keep
from firn.engine.writer import SizedWriter
from firn.errors import FirnError
from firn.io.deletion_vectors import live_batches, read_positions
from firn.io.integrity import read_batches
from firn.io.storage import Storage
from firn.model.changes import ORD
from firn.model.keyhash import hash_keys
from firn.model.keyorder import bound_scalars, count_below, in_range
from firn.model.merge_on_read import SEQ
from firn.model.projection import file_view, stored_names
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, TaskResult, TaskSpec, moved_output
from firn.model.values import KeyTuple, key_from_json

if TYPE_CHECKING:
    # Settings are resolved on the driver: this module runs in Spark's Python workers,
    # which have no pydantic (see firn.engine.shipping).
    from firn.settings import FirnSettings

READ_BATCH_ROWS = 65536
DEFAULT_MEMORY_BUDGET = 1 << 30
HOLD_EXPANSION = 16
"""Bytes in memory per byte of a compressed change file, at most (a fold holds its
change rows only while that stays inside the task's memory budget)."""


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
        checked = _Inputs(storage, table, spec)
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
    reader = _Inputs(storage, table, spec)
    stats = SpillStats()
    choice = BaseChoice(rewrite=list(spec.base_files))
    try:
        if table.keyed:
            if any(may_keep(spec, f) for f in spec.base_files):
                choice = choose_base(
                    storage, table, spec, attempt, reader.change_keys(limits.memory_budget)
                )
            with SpillDir(limits.spill_dir, f"firn-task-{spec.task_id}-") as spill_dir:
                _merge(
                    table, reader, choice.rewrite, writers, limits.memory_budget, spill_dir, stats
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
        )

    if spec.kind != "minor":
        return [writer(table.schema, "B")]
    return [writer(change_schema(table, "I"), "I"), writer(change_schema(table, "D"), "D")]


def _merge(
    table: TableSchema,
    reader: _Inputs,
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


class _Inputs:
    """Reads a task's input files as work-schema batches, filtered to the task."""

    def __init__(self, storage: Storage, table: TableSchema, spec: TaskSpec) -> None:
        self.storage = storage
        self.table = table
        self.spec = spec
        self.schema = work_schema(table)
        self.rows_read = 0
        self._held: list[pa.Table] | None = None
        key_schema = table.key_schema
        self._lower = None if spec.lower is None else bound_scalars(spec.lower, key_schema)
        self._upper = None if spec.upper is None else bound_scalars(spec.upper, key_schema)

    def _batches(self, f: InputFile, columns: Sequence[str]) -> Iterator[pa.Table]:
        """The file's ``columns`` (those it has; a table column added since it was
        written as its default, ``firn.model.projection``), checked against the size,
        record count and columns the catalog recorded (``firn.io.integrity``): a
        damaged input fails the task, never a merge that silently loses its rows."""
        required = stored_schema(self.table, f.file_type, f.schema_id)
        view = None
        if f.schema_id != self.table.schema_id:
            view = file_view(self.table.version_schema(f.schema_id), self._target(columns))
            columns = stored_names(view, columns)
        batches: Iterable[pa.RecordBatch] = read_batches(
            self.storage, f, columns, READ_BATCH_ROWS, required
        )
        if f.deletion_vector is not None:  # a base file: skip the rows it hides
            hidden = read_positions(self.storage, f.deletion_vector, f.record_count)
            batches = live_batches(batches, hidden)
        for batch in batches:
            self.rows_read += batch.num_rows
            yield pa.Table.from_batches([batch if view is None else view.adapt(batch)])

    def _target(self, columns: Sequence[str]) -> pa.Schema:
        """``columns`` as fields: the table's, or Firn's own ``_ord`` and ``_seq``."""
        fields = []
        for name in columns:
            index = self.table.schema.get_field_index(name)
            if index >= 0:
                fields.append(self.table.schema.field(index))
            else:
                fields.append(self.schema.field(name))
        return pa.schema(fields)

    def _keep(self, f: InputFile, rows: pa.Table) -> pa.Table:
        """Only the rows of this task's node and key range."""
        key = self.table.primary_key
        mask = None
        if f.node_m < self.spec.node_m:
            hashes = hash_keys([rows.column(c) for c in key])
            inside = self.spec.node.contains(hashes)
            mask = pa.chunked_array([pa.array(inside)])
        ranged = in_range(rows, key, self._lower, self._upper)
        if ranged is not None:
            mask = ranged if mask is None else pc.and_(mask, ranged)
        return rows if mask is None else rows.filter(mask)

    def _with_lsn(self, rows: pa.Table, seq: pa.Array, ord_: pa.Array, deleted: bool) -> pa.Table:
        n = rows.num_rows
        columns = [
            rows.column(f.name) if f.name in rows.column_names else pa.nulls(n, f.type)
            for f in self.table.schema
        ]
        flag = pa.array(np.full(n, deleted, dtype=bool))
        return pa.Table.from_arrays([*columns, seq, ord_, flag], schema=self.schema)

    def change_rows(self) -> Iterator[pa.Table]:
        """Unmerged change rows of this plan (seq in (from_merged_seq, S]); the ones
        ``change_keys`` held, if it did."""
        if self._held is not None:
            held, self._held = self._held, None
            yield from held
            return
        spec = self.spec
        for f in spec.change_files:
            deleted = f.file_type == "D"
            columns = [*(self.table.primary_key if deleted else self.table.schema.names), ORD, SEQ]
            for rows in self._batches(f, columns):
                if SEQ in rows.column_names:
                    # Minor-compacted files: each row's own seq, filtered to the plan.
                    seq = pc.fill_null(rows.column(SEQ), f.seq)
                    fresh = pc.and_(
                        pc.greater(seq, spec.from_merged_seq), pc.less_equal(seq, spec.to_seq)
                    )
                    rows = rows.set_column(rows.column_names.index(SEQ), SEQ, seq).filter(fresh)
                else:
                    seq = pa.array(np.full(rows.num_rows, f.seq, np.int64))
                    rows = rows.append_column(SEQ, seq)
                rows = self._keep(f, rows)
                if rows.num_rows:
                    yield self._with_lsn(rows, rows.column(SEQ), rows.column(ORD), deleted)

    def change_keys(self, memory_budget: int) -> pa.Table:
        """The distinct keys of this task's change rows (key columns only). Change
        files small next to ``memory_budget`` are read whole once and held for
        ``change_rows`` (a fold then opens each once: per file, opening costs more
        than the rows); larger ones are read twice, the key columns here."""
        spec = self.spec
        key = list(self.table.primary_key)
        parts = [self.table.key_schema.empty_table()]
        if sum(f.size_bytes for f in spec.change_files) * HOLD_EXPANSION <= memory_budget:
            self._held = list(self.change_rows())
            parts += [rows.select(key) for rows in self._held]
            return pa.concat_tables(parts).group_by(key).aggregate([])
        for f in spec.change_files:
            for rows in self._batches(f, [*key, SEQ]):
                if SEQ in rows.column_names:
                    seq = pc.fill_null(rows.column(SEQ), f.seq)
                    rows = rows.filter(
                        pc.and_(
                            pc.greater(seq, spec.from_merged_seq), pc.less_equal(seq, spec.to_seq)
                        )
                    )
                parts.append(self._keep(f, rows).select(key))
        return pa.concat_tables(parts).group_by(key).aggregate([])

    def movable(self) -> bool:
        """Whether this move task's change files can become base files as they are
        (``TaskSpec.move``): insert files of the task's node with no base to merge,
        keys unique and in ascending order, every row of this plan. Reads the key and
        ``_seq`` columns only."""
        spec = self.spec
        if spec.base_files or spec.lower is not None or spec.upper is not None:
            return False
        key = self.table.primary_key
        order = [(c, "ascending") for c in key]
        for f in spec.change_files:
            if f.file_type != "I" or f.node != spec.node:
                return False
            parts = list(self._batches(f, [*key, SEQ]))
            rows = pa.concat_tables(parts) if parts else pa.table({})
            if rows.num_rows != f.record_count:
                return False
            if SEQ in rows.column_names:
                seqs = rows.column(SEQ)
                low, high = pc.min(seqs).as_py(), pc.max(seqs).as_py()
            else:
                low = high = f.seq
            if low is None or low <= spec.from_merged_seq or high > spec.to_seq:
                return False
            keys = rows.select(key)
            in_order = pc.sort_indices(keys, sort_keys=order)
            if not pc.all(pc.equal(in_order, pa.array(np.arange(len(keys))))).as_py():
                return False
            if keys.group_by(key).aggregate([]).num_rows != keys.num_rows:
                return False
        return True

    def base_file_runs(self, files: Sequence[InputFile]) -> list[list[InputFile]]:
        """``files`` (base files) as runs of key-disjoint files in key order (files
        written by one task at one node form one run; files of other levels, and
        files whose deletion vectors hide the rows they overlap in, make more runs)."""
        key_schema = self.table.key_schema
        ranged = sorted(
            (
                (key_from_json(f.min_key, key_schema), key_from_json(f.max_key, key_schema), f)
                for f in files
                if f.min_key is not None and f.max_key is not None
            ),
            key=lambda r: r[0],
        )
        runs: list[tuple[KeyTuple, list[InputFile]]] = []
        for lo, hi, f in ranged:
            for i, (run_hi, files) in enumerate(runs):
                if run_hi < lo:
                    files.append(f)
                    runs[i] = (hi, files)
                    break
            else:
                runs.append((hi, [f]))
        return [files for _, files in runs]

    def base_rows(self, files: Sequence[InputFile]) -> Iterator[pa.Table]:
        zero = pa.scalar(0, pa.int64())
        for f in files:
            for rows in self._batches(f, self.table.schema.names):
                rows = self._keep(f, rows)
                if rows.num_rows:
                    n = rows.num_rows
                    const = pa.repeat(zero, n)
                    yield self._with_lsn(rows, const, const, False)

    def all_rows(self) -> Iterator[pa.Table]:
        """Every row of every input, for bin-packing (no key, no merge rule)."""
        names = self.table.schema.names
        for f in (*self.spec.base_files, *self.spec.change_files):
            for rows in self._batches(f, names):
                yield rows.select(names)
