"""A compaction task's inputs, read as the merge needs them (design §6).

Every read is checked against what the catalog recorded (size, record count,
columns: ``firn.io.integrity``), so a damaged input fails the task instead of a merge
that silently loses its rows; files written under an earlier schema version are read
through their view of the task's definition (``firn.model.projection``); base files
skip the rows their deletion vectors hide; change rows are only this plan's (seq in
``(from_merged_seq, S]``); and only rows of the task's node and key range are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from firn.engine.runs import work_schema
from firn.engine.scan import stored_schema
from firn.io.deletion_vectors import live_batches, read_positions
from firn.io.integrity import read_batches, read_whole
from firn.io.storage import Storage
from firn.model.changes import ORD
from firn.model.keyhash import hash_keys
from firn.model.keyorder import bound_scalars, in_range
from firn.model.merge_on_read import SEQ
from firn.model.projection import file_view, stored_names
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, TaskSpec
from firn.model.values import KeyTuple, key_from_json

READ_BATCH_ROWS = 65536
POS = "_firn_pos"
"""A row's position in its file (``TaskInputs.batches(positions=True)``)."""
HOLD_EXPANSION = 16
"""Bytes in memory per byte of a compressed change file, at most (a fold holds its
change rows only while that stays inside the task's memory budget)."""


class TaskInputs:
    """Reads a task's input files as work-schema batches, filtered to the task."""

    def __init__(self, storage: Storage, table: TableSchema, spec: TaskSpec) -> None:
        self.storage = storage
        self.table = table
        self.spec = spec
        self.schema = work_schema(table)
        self.rows_read = 0
        self._held: list[pa.Table] | None = None
        self._footers: dict[str, pq.FileMetaData] = {}
        key_schema = table.key_schema
        self._lower = None if spec.lower is None else bound_scalars(spec.lower, key_schema)
        self._upper = None if spec.upper is None else bound_scalars(spec.upper, key_schema)

    def batches(
        self, f: InputFile, columns: Sequence[str], *, positions: bool = False
    ) -> Iterator[pa.Table]:
        """The file's ``columns`` (those it has; a table column added since it was
        written as its default, ``firn.model.projection``), checked against the size,
        record count and columns the catalog recorded (``firn.io.integrity``): a
        damaged input fails the task, never a merge that silently loses its rows.
        ``positions``: each row also carries its position in the file (``POS``)."""
        required = stored_schema(self.table, f.file_type, f.schema_id)
        view = None
        if f.schema_id != self.table.schema_id:
            view = file_view(self.table.version_schema(f.schema_id), self._target(columns))
            columns = stored_names(view, columns)
        batches: Iterable[pa.RecordBatch] = read_batches(
            self.storage, f, columns, READ_BATCH_ROWS, required
        )
        live: np.ndarray | None = None
        if f.deletion_vector is not None:  # a base file: skip the rows it hides
            hidden = read_positions(self.storage, f.deletion_vector, f.record_count)
            batches = live_batches(batches, hidden)
            if positions:
                live = np.setdiff1d(np.arange(f.record_count, dtype=np.int64), hidden)
        done = 0
        for batch in batches:
            self.rows_read += batch.num_rows
            rows = pa.Table.from_batches([batch if view is None else view.adapt(batch)])
            if positions:
                n = rows.num_rows
                at = np.arange(done, done + n) if live is None else live[done : done + n]
                rows = rows.append_column(POS, pa.array(at, pa.int64()))
                done += n
            yield rows

    def whole(self, f: InputFile, columns: Sequence[str]) -> pa.Table:
        """Every row of the file (deletion vector or not), ``columns`` only, in file
        order and checked as ``batches`` checks them; not counted in ``rows_read``."""
        required = stored_schema(self.table, f.file_type, f.schema_id)
        view = file_view(self.table.version_schema(f.schema_id), self._target(columns))
        names = stored_names(view, columns)
        rows = read_whole(self.storage, f, names, required, self._footers)
        return view.adapt(rows).select(list(columns))

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

    def keep(self, f: InputFile, rows: pa.Table) -> pa.Table:
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

    def planned(self, f: InputFile, rows: pa.Table) -> pa.Table:
        """A change file's ``rows``, each with its ``_seq``, this plan's only: a
        minor-compacted file stores each row's own seq, filtered to the plan's
        ``(from_merged_seq, S]``; other files are all of their file's seq."""
        if SEQ not in rows.column_names:
            return rows.append_column(SEQ, pa.array(np.full(rows.num_rows, f.seq, np.int64)))
        seq = pc.fill_null(rows.column(SEQ), f.seq)
        fresh = pc.and_(
            pc.greater(seq, self.spec.from_merged_seq), pc.less_equal(seq, self.spec.to_seq)
        )
        return rows.set_column(rows.column_names.index(SEQ), SEQ, seq).filter(fresh)

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
            for rows in self.batches(f, columns):
                rows = self.keep(f, self.planned(f, rows))
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
            for rows in self.batches(f, [*key, SEQ]):
                parts.append(self.keep(f, self.planned(f, rows)).select(key))
        return pa.concat_tables(parts).group_by(key).aggregate([])

    def forget_held(self) -> None:
        """Drop the change rows ``change_keys`` held (a merge that reads its change
        files column group by column group does not use them)."""
        self._held = None

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
            parts = list(self.batches(f, [*key, SEQ]))
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
            for rows in self.batches(f, self.table.schema.names):
                rows = self.keep(f, rows)
                if rows.num_rows:
                    n = rows.num_rows
                    const = pa.repeat(zero, n)
                    yield self._with_lsn(rows, const, const, False)

    def all_rows(self) -> Iterator[pa.Table]:
        """Every row of every input, for bin-packing (no key, no merge rule)."""
        names = self.table.schema.names
        for f in (*self.spec.base_files, *self.spec.change_files):
            for rows in self.batches(f, names):
                yield rows.select(names)
