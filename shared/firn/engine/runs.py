"""Key-sorted runs of rows and the windowed k-way merge over them (the kernel's core).

Every input of a merge becomes a *run*: rows sorted by key, arriving in batches, in
one *work schema* (the table's columns, value columns nullable, plus ``_seq``,
``_ord`` and ``_firn_del``). Base rows get LSN (0, 0), below every change row, so one
rule resolves everything: per key the row with the greatest LSN wins, and a winning
delete removes the key.

``windows`` merges runs without sorting them again: it repeatedly takes the
smallest "last buffered key" among the runs as a bound and hands out, from every
run, the rows with key <= bound. A window therefore holds every row of each of its
keys, and windows come in key order; at least one run's buffer is used up per
window, so memory is one batch per run.

``spill_runs`` turns an unbounded stream of change rows into runs that fit a memory
budget: rows accumulate until a quarter of the budget (sorting needs about as much
again), are reduced to one row per key, sorted, and written to local disk as Arrow
IPC (seed 001's disk-backed map); the last chunk stays in memory. Runs are read back
in batches sized so that one batch of every run is a quarter of the budget.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firn.model.changes import ORD
from firn.model.keyorder import count_at_most, row_scalars
from firn.model.merge_on_read import SEQ, latest_positions
from firn.model.schema import TableSchema
from firn.model.values import KeyTuple, key_at, key_from_json

DEL = "_firn_del"
BATCH_ROWS = 65536
SPILL_BATCH_ROWS = 4096


def work_schema(table: TableSchema) -> pa.Schema:
    """The table's columns (value columns nullable, as delete rows have none), then
    ``_seq``, ``_ord`` and the delete flag."""
    fields = [f if f.name in table.primary_key else f.with_nullable(True) for f in table.schema]
    return pa.schema(
        [
            *fields,
            pa.field(SEQ, pa.int64(), False),
            pa.field(ORD, pa.int64(), False),
            pa.field(DEL, pa.bool_(), False),
        ]
    )


def latest_per_key(rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """One row per key, the one with the greatest LSN, in key order."""
    if rows.num_rows == 0:
        return rows
    # Only the key and LSN columns are made contiguous and sorted; the whole rows
    # are copied once, by the final take.
    seq = np.asarray(rows.column(SEQ).to_numpy(), dtype=np.int64)
    ord_ = np.asarray(rows.column(ORD).to_numpy(), dtype=np.int64)
    keys = rows.select(list(key_columns)).combine_chunks()
    return rows.take(latest_positions(keys, seq, ord_))


class SortedRun:
    """Key-sorted rows arriving in batches; hands out key-bounded prefixes."""

    def __init__(self, batches: Iterator[pa.Table], table: TableSchema) -> None:
        self._batches = batches
        self._key = list(table.primary_key)
        self._key_schema = table.key_schema
        self._buffer: pa.Table | None = None

    def _fill(self) -> bool:
        while self._buffer is None or self._buffer.num_rows == 0:
            batch = next(self._batches, None)
            if batch is None:
                self._buffer = None
                return False
            self._buffer = batch
        return True

    def last_key(self) -> KeyTuple | None:
        """The greatest key buffered (loading a batch if needed); None when done."""
        if not self._fill():
            return None
        assert self._buffer is not None
        last = key_at(self._buffer, self._key, self._buffer.num_rows - 1)
        return key_from_json(last, self._key_schema)

    def bound(self) -> list[pa.Scalar]:
        assert self._buffer is not None
        return row_scalars(self._buffer, self._key, self._buffer.num_rows - 1)

    def take_until(self, bound: Sequence[pa.Scalar]) -> pa.Table:
        """Remove and return the buffered rows with key <= bound."""
        assert self._buffer is not None
        n = count_at_most(self._buffer, self._key, bound)
        head = self._buffer.slice(0, n)
        self._buffer = self._buffer.slice(n)
        return head


def windows(runs: Sequence[SortedRun]) -> Iterator[list[pa.Table]]:
    """Non-empty groups of rows, one part per run, in key order; every row of a key
    is in the same window (see the module doc)."""
    while True:
        live = [(key, run) for run in runs if (key := run.last_key()) is not None]
        if not live:
            return
        _, lowest = min(live, key=lambda pair: pair[0])
        bound = lowest.bound()
        parts = [run.take_until(bound) for _, run in live]
        yield [p for p in parts if p.num_rows]


def resolve(parts: Sequence[pa.Table], key_columns: Sequence[str]) -> pa.Table:
    """The winning row of every key in one window (deletes still in, flagged)."""
    if len(parts) == 1:
        # A run holds one row per key already (base files by invariant, change runs
        # by construction), so a window with one part needs no resolving.
        return parts[0]
    return latest_per_key(pa.concat_tables(parts), key_columns)


def drop_deletes(rows: pa.Table) -> pa.Table:
    deleted = rows.column(DEL)
    if not pc.any(deleted).as_py():
        return rows
    return rows.filter(pc.invert(deleted))


def table_slices(rows: pa.Table, batch_rows: int = BATCH_ROWS) -> Iterator[pa.Table]:
    for start in range(0, rows.num_rows, batch_rows):
        yield rows.slice(start, batch_rows)


def _rows_for(rows: pa.Table, budget_bytes: int) -> int:
    """How many rows of ``rows`` take about ``budget_bytes``."""
    per_row = max(1, int(rows.nbytes) // max(1, rows.num_rows))
    return max(1024, int(budget_bytes // per_row))


@dataclass
class SpillStats:
    runs_on_disk: int = 0


class SpillDir:
    """A task's spill directory, made at the first spill and removed on exit. Most
    merges fit in memory, and making and removing a directory for each would cost
    every small merge (a few percent of a 200 KB minor's time under py-spy)."""

    def __init__(self, parent: str | None, prefix: str) -> None:
        self._parent = parent
        self._prefix = prefix
        self._path: str | None = None

    @property
    def path(self) -> str:
        if self._path is None:
            self._path = tempfile.mkdtemp(prefix=self._prefix, dir=self._parent)
        return self._path

    def __enter__(self) -> SpillDir:
        return self

    def __exit__(self, *_: object) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


def spill_runs(
    batches: Iterator[pa.Table],
    table: TableSchema,
    schema: pa.Schema,
    memory_budget: int,
    spill_dir: SpillDir,
    stats: SpillStats,
) -> list[SortedRun]:
    """Change rows as sorted, one-row-per-key runs within ``memory_budget`` (see the
    module doc); runs on disk are read back one batch at a time."""
    key = list(table.primary_key)
    chunk_limit = max(1, memory_budget // 4)
    pending: list[pa.Table] = []
    pending_bytes = 0
    paths: list[str] = []
    for batch in batches:
        pending.append(batch)
        pending_bytes += batch.nbytes
        if pending_bytes >= chunk_limit:
            run = latest_per_key(pa.concat_tables(pending), key)
            pending, pending_bytes = [], 0
            paths.append(_write_run(run, schema, spill_dir.path, len(paths), stats))
            del run
            # Give freed buffers back to the OS, so the peak stays near one chunk.
            pa.default_memory_pool().release_unused()
    last = latest_per_key(pa.concat_tables(pending), key) if pending else None
    del pending
    # The merge holds one batch per run: together about a quarter of the budget.
    per_run = max(1 << 20, memory_budget // (4 * (len(paths) + 1)))
    runs = [SortedRun(_read_run(path, per_run), table) for path in paths]
    if last is not None and last.num_rows:
        runs.append(SortedRun(table_slices(last, _rows_for(last, per_run)), table))
    return runs


def _write_run(rows: pa.Table, schema: pa.Schema, spill_dir: str, n: int, stats: SpillStats) -> str:
    path = os.path.join(spill_dir, f"run-{n:05d}.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        # Small batches on disk, so reading back can take as few rows as it likes.
        for part in table_slices(rows.cast(schema), SPILL_BATCH_ROWS):
            writer.write_table(part)
    stats.runs_on_disk += 1
    return path


def _read_run(path: str, batch_bytes: int) -> Iterator[pa.Table]:
    """A spilled run, in batches of about ``batch_bytes``."""
    # Plain file reads, not a memory map: mapped pages would count against the
    # process's resident memory, which is what the budget bounds.
    with pa.OSFile(path, "rb") as source:
        reader = pa.ipc.open_file(source)
        batches: list[pa.RecordBatch] = []
        size = 0
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            batches.append(batch)
            size += batch.nbytes
            if size >= batch_bytes:
                yield pa.Table.from_batches(batches)
                batches, size = [], 0
        if batches:
            yield pa.Table.from_batches(batches)
