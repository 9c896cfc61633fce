"""The driver's side of a Firn write: check the DataFrame and stage a directory
before any task runs, then register what the tasks wrote in ONE catalog step, or
delete it.

Why a staged directory, recorded by the driver: executors cannot be assumed to
reach Postgres, and a task does not know its files' names before it has written
them (base files are cut by size). So the driver records ``spark/<uuid>/`` (an
append), ``load/<uuid>/`` (an overwrite) or ``stream/<hash of the stream id>/`` (a
streaming query: Spark creates several writers per query, which must agree) in
``orphan_file`` first, and every task attempt writes under it. Whatever then
happens, nothing leaks: the commit clears the record in the transaction that
registers the files; ``abort`` deletes the directory and its record; a driver that
dies leaves the record, and expiry deletes the directory after ``orphan.retention``
(files of a failed task attempt inside a committed directory are found by the
storage sweep). A stream keeps its directory for its next batches and refreshes its
record at each commit.

Exactly once for streams: each micro-batch is committed with ``(stream id, batch
id)`` recorded in the same transaction (``stream_batch``); a batch Spark runs again
(after a failure between Firn's commit and Spark's own commit log) finds its record,
deletes the files it wrote again, and commits nothing.

These functions run where Spark runs a data source's driver-side code (a Python
worker on the driver's machine) and import the API: the catalog is reached here
only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from firn.api.catalog import Catalog, connect
from firn.api.table import Table
from firn.engine.loading import duplicate_across
from firn.errors import ConfigError, StorageError
from firn.model.changes import OP, ORD, UPSERT, validate_changes, validate_rows
from firn.model.commits import StagedFile, StreamBatch
from firn.settings import FirnSettings
from firn.spark.options import WriteOptions, write_options
from firn.spark.tasks import (
    DISTINCT_ORDER,
    ONE_ROW_PER_KEY,
    FirnCommitMessage,
    WriteJob,
    change_set,
    order_values,
)

log = logging.getLogger(__name__)


@contextmanager
def opened(settings: Mapping[str, str]) -> Iterator[Catalog]:
    """The catalog, from the write's options and the ``FIRN_`` environment."""
    # Keyword arguments, not model_validate: the unset fields still come from FIRN_.
    with connect(settings=FirnSettings(**dict(settings))) as catalog:  # type: ignore[arg-type]
        yield catalog


def open_job(
    options: Mapping[str, str], schema: pa.Schema, *, overwrite: bool, stream: bool
) -> tuple[WriteJob, WriteOptions]:
    """Check the write against the table and stage its directory."""
    opts = write_options(options, stream=stream)
    if overwrite and stream:
        raise ConfigError("a streaming write to Firn appends change sets; it cannot overwrite")
    with opened(opts.settings) as catalog:
        table = catalog.table(opts.table)
        if opts.merge_schema:
            table.merge_schema(schema, ignore=[opts.order_by] if opts.order_by else [])
        op = _check_schema(table, schema, opts, overwrite=overwrite)
        kind = "stream" if stream else "load" if overwrite else "spark"
        staged_dir = table.stage_directory(kind, opts.stream_id if stream else None)
    job = WriteJob(
        table=table.name,
        table_id=table.table_id,
        location=table.location,
        definition=table.definition,
        change_buckets=table.properties.change_buckets,
        base_buckets=table.properties.base_buckets,
        target_file_size=table.properties.target_file_size,
        staged_dir=staged_dir,
        overwrite=overwrite,
        op=op,
        order_by=opts.order_by,
        ignore_dropped=table.properties.schema_ignore_dropped,
        change_split_rows=table.properties.change_split_rows,
        compression=table.properties.file_compression,
    )
    log.info("%s: write staged under %s", table.name, staged_dir)
    return job, opts


def _check_schema(
    table: Table, schema: pa.Schema, opts: WriteOptions, *, overwrite: bool
) -> str | None:
    """The operation every row gets (None: an ``_op`` column says), after checking
    the DataFrame's columns and types on an empty table of its schema."""
    empty = schema.empty_table()
    if overwrite:
        if OP in schema.names or opts.op is not None or opts.order_by is not None:
            raise ConfigError(
                'mode("overwrite") loads whole rows, one per key: drop the _op column '
                "and the op and order_by options"
            )
        validate_rows(
            table.definition, empty, ignore_dropped=table.properties.schema_ignore_dropped
        )
        return None
    if opts.order_by is not None:
        if opts.order_by not in schema.names:
            raise ConfigError(f"order_by column {opts.order_by!r} is not in the DataFrame")
        order_values(opts.order_by, empty.column(opts.order_by))
    op = opts.op if OP in schema.names or opts.op is not None else UPSERT
    probe = WriteJob(
        table.name,
        table.table_id,
        table.location,
        table.definition,
        1,
        1,
        1,
        "",
        False,
        op,
        opts.order_by,
    )
    changes, _ = change_set(probe, empty)
    validate_changes(
        table.definition, changes, ignore_dropped=table.properties.schema_ignore_dropped
    )
    return op


def commit_job(
    job: WriteJob,
    opts: WriteOptions,
    messages: Sequence[Any],
    *,
    batch: StreamBatch | None = None,
) -> int | None:
    """Register the tasks' files as one change set or load; returns its seq (None:
    nothing committed: no rows, or a stream batch committed before)."""
    files = [f for m in messages if isinstance(m, FirnCommitMessage) for f in m.files]
    with opened(opts.settings) as catalog:
        table = _same_table(catalog, job)
        if batch is not None and table.catalog.stream_batch_seq(job.table_id, batch) is not None:
            log.info("%s: %s committed before; its files written again go", job.table, batch)
            _delete_files(table, files)
            return None
        problem = duplicate_across(
            job.definition,
            table.storage,
            files,
            extra_columns=[ORD] if job.order_by else (),
            rule=DISTINCT_ORDER if job.order_by else ONE_ROW_PER_KEY,
        )
        if problem is not None:
            _discard(table, job, files, batch)
            raise problem
        if job.overwrite:
            partitions = None
            if opts.dynamic_overwrite:
                partitions = sorted({f.partition_key for f in files})
            return table.load_staged(files, job.staged_dir, partitions)
        if not files:
            if batch is not None:
                table.catalog.record_empty_batch(job.table_id, batch)
            else:
                table.discard_directory(job.staged_dir)
            return None
        return table.commit_staged(files, job.staged_dir, stream=batch)


def abort_job(
    job: WriteJob, opts: WriteOptions, messages: Sequence[Any], *, stream: bool = False
) -> None:
    """Delete what the job wrote (a stream: what this batch wrote) and its record."""
    files = [f for m in messages if isinstance(m, FirnCommitMessage) for f in m.files]
    with opened(opts.settings) as catalog:
        table = _same_table(catalog, job)
        _discard(table, job, files, StreamBatch("", 0) if stream else None)


def _discard(
    table: Table, job: WriteJob, files: Sequence[StagedFile], batch: StreamBatch | None
) -> None:
    if batch is None:
        table.discard_directory(job.staged_dir)
    else:
        _delete_files(table, files)


def _delete_files(table: Table, files: Sequence[StagedFile]) -> None:
    for f in files:
        try:
            table.storage.delete(f.path)
        except StorageError as exc:  # the storage sweep finds it later
            log.warning("%s: could not delete %s: %s", table.name, f.path, exc)


def _same_table(catalog: Catalog, job: WriteJob) -> Table:
    table = catalog.table_by_id(job.table_id)
    if table is None or table.name != job.table:
        raise ConfigError(f"table {job.table!r} was dropped while the write ran")
    return table
