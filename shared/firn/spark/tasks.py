"""What one Spark task of a Firn write runs, on an executor: its rows in, staged
files out, described in a commit message the driver registers.

Executors never reach the catalog. The driver recorded one staged directory for
the whole job before any task ran (``firn.spark.jobs``); each task attempt writes
under a sub-directory of its own and, if it fails, deletes it. What a killed task
leaves is under the recorded directory, deleted with it on abort or by orphan
cleanup (``firn.catalog.expiry``, ``firn.catalog.orphans``).

- append (``mode("append")``, streams): rows become change files, split by
  partition, change node and operation (``firn.engine.staging``), as ``Table.commit``
  writes them;
- overwrite: rows become base files in key order at the base level
  (``firn.engine.loading``), as ``Table.load`` writes them.

Order inside one change set: Spark gives a DataFrame's rows no order, so a key may
appear once per write, unless ``order_by`` names a column whose value orders that
key's rows (its value becomes the row's ``_ord``); a repeated key (or key and order
value) is refused. Each task checks its own rows; the driver checks across tasks.

Imports: pyarrow, numpy, pyspark, and Firn's ``model``, ``io.storage`` and the
engine's ``staging``, ``loading`` and ``writer``; never the catalog or the API.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from firn.engine.loading import duplicate_error, group_rows, write_groups
from firn.engine.staging import ChangeGroup, file_name, split_changes, write_group
from firn.errors import ConfigError, StorageError
from firn.io.storage import Storage
from firn.model.changes import DELETE, OP, ORD, validate_changes, validate_rows
from firn.model.commits import StagedFile
from firn.model.files import DEFAULT_CODEC
from firn.model.merge_on_read import run_starts
from firn.model.schema import TableSchema

ONE_ROW_PER_KEY = (
    "a DataFrame written to Firn holds at most one row per key, because Spark gives "
    'its rows no order; to apply several changes of one key, order them: option("order_by", '
    "a column whose greater value is the later change)"
)
DISTINCT_ORDER = "the rows of one key need distinct order_by values"


@dataclass(frozen=True)
class WriteJob:
    """Everything a task needs, fixed on the driver before the job starts (picklable)."""

    table: str
    table_id: int
    location: str
    definition: TableSchema
    change_buckets: int
    base_buckets: int
    target_file_size: int
    staged_dir: str
    """Recorded in the catalog before any task ran; ends in ``/``."""
    overwrite: bool
    op: str | None
    """``U``/``D`` for every row; None: the rows carry ``_op``."""
    order_by: str | None
    ignore_dropped: bool = False
    """``schema.ignore-dropped-columns``: columns the table dropped are left out."""
    change_split_rows: int = 0
    """``change.split-rows``: a task's rows of a partition below it go to its root node."""
    compression: str = DEFAULT_CODEC
    """``file.compression``: the codec of a load's base files and of change files."""


@dataclass(frozen=True)
class FirnCommitMessage(WriterCommitMessage):
    """What one task wrote."""

    files: tuple[StagedFile, ...]
    rows: int


def write_task(job: WriteJob, batches: Iterable[pa.RecordBatch]) -> FirnCommitMessage:
    """Write one task's rows; on an error its files are deleted and it is raised."""
    rows = _table(batches)
    if rows.num_rows == 0:
        return FirnCommitMessage((), 0)
    storage = Storage(job.location)
    directory = f"{job.staged_dir}{_attempt_name()}"
    try:
        files = (
            _write_base(job, storage, directory, rows)
            if job.overwrite
            else _write_changes(job, storage, directory, rows)
        )
    except BaseException:
        with contextlib.suppress(StorageError, ConfigError):
            storage.delete_dir(directory)
        raise
    return FirnCommitMessage(tuple(files), rows.num_rows)


def change_set(job: WriteJob, rows: pa.Table) -> tuple[pa.Table, pa.ChunkedArray | None]:
    """The rows as a change set (table columns plus ``_op``) and their order values."""
    order = None
    if job.order_by is not None:
        order = order_values(job.order_by, rows.column(job.order_by))
        rows = rows.drop_columns([job.order_by])
    if job.op is not None:
        if OP in rows.column_names:
            raise ConfigError(f"the rows have an {OP!r} column and option op is set: keep one")
        if job.op == DELETE:
            # Deletes need only the key (and partition) columns.
            names = rows.column_names
            for f in job.definition.schema:
                if f.name not in names:
                    rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
        rows = rows.append_column(OP, pa.array(np.full(rows.num_rows, job.op), pa.string()))
    return rows, order


def order_values(name: str, column: pa.ChunkedArray) -> pa.ChunkedArray:
    """An ``order_by`` column as non-negative int64 (integers, dates, timestamps)."""
    t = column.type
    if not (pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_date(t)):
        raise ConfigError(
            f"order_by column {name!r} must be an integer, date or timestamp, got {t}"
        )
    if column.null_count:
        raise ConfigError(f"order_by column {name!r} has nulls")
    if pa.types.is_date32(t):
        column = column.cast(pa.int32())
    values = column.cast(pa.int64())
    if len(values) and pc.min(values).as_py() < 0:
        raise ConfigError(f"order_by column {name!r} has negative values")
    return values


def check_unique(table: TableSchema, changes: pa.Table, rule: str) -> None:
    """``ConfigError`` when the key columns (and ``_ord``, when it orders rows) of
    ``changes`` repeat."""
    columns = [*table.primary_key, ORD] if rule == DISTINCT_ORDER else list(table.primary_key)
    keys = changes.select(columns).combine_chunks()
    sorted_keys = keys.take(pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in columns]))
    starts = run_starts(sorted_keys)
    if len(starts) != sorted_keys.num_rows:
        raise duplicate_error(table, sorted_keys, starts, rule)


def _write_changes(
    job: WriteJob, storage: Storage, directory: str, rows: pa.Table
) -> list[StagedFile]:
    table = job.definition
    changes, order = change_set(job, rows)
    validated = validate_changes(table, changes, ignore_dropped=job.ignore_dropped)
    if not table.keyed and pc.any(pc.equal(validated.column(OP), DELETE)).as_py():
        raise ConfigError(f"table {job.table!r} has no primary key: it only takes upserts")
    groups = split_changes(table, job.change_buckets, validated, job.change_split_rows)
    if order is not None:
        positions = order.to_numpy()
        validated = validated.set_column(validated.schema.get_field_index(ORD), ORD, order)
        groups = [_reordered(table, g, positions) for g in groups]
    if table.keyed:
        check_unique(table, validated, DISTINCT_ORDER if order is not None else ONE_ROW_PER_KEY)
    return [
        write_group(table, storage, g, f"{directory}/{file_name(g)}", job.compression)
        for g in groups
    ]


def _reordered(table: TableSchema, group: ChangeGroup, order: npt.NDArray[np.int64]) -> ChangeGroup:
    """A change group whose ``_ord`` (the row position) is replaced by the row's
    order value, sorted again by key and ``_ord`` as change files are."""
    rows = group.rows
    index = rows.schema.get_field_index(ORD)
    ords = pa.array(order[rows.column(ORD).to_numpy()], pa.int64())
    rows = rows.set_column(index, pa.field(ORD, pa.int64(), nullable=False), ords)
    keys = [(c, "ascending") for c in (*table.primary_key, ORD)]
    return dataclasses.replace(group, rows=rows.take(pc.sort_indices(rows, sort_keys=keys)))


def _write_base(
    job: WriteJob, storage: Storage, directory: str, rows: pa.Table
) -> list[StagedFile]:
    table = job.definition
    validated = validate_rows(table, rows, ignore_dropped=job.ignore_dropped)
    groups = group_rows(table, job.base_buckets, validated)
    # One task per core already: write its groups one after the other.
    return write_groups(
        table,
        storage,
        directory,
        validated,
        groups,
        job.target_file_size,
        threads=1,
        compression=job.compression,
    )


def _table(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    collected = list(batches)
    if not collected:
        return pa.table({})
    return pa.Table.from_batches(collected)


def _attempt_name() -> str:
    """A directory name unique to this task attempt, readable in a listing."""
    from pyspark import TaskContext

    context = TaskContext.get()
    suffix = uuid.uuid4().hex[:12]
    if context is None:
        return f"local-{suffix}"
    return f"p{context.partitionId():05d}-a{context.attemptNumber()}-{suffix}"
