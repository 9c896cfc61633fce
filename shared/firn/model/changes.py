"""Validating a change set before it is written (design §2, 10).

A change set is a ``pyarrow.Table`` with exactly the table's columns plus ``_op``
(``"U"`` upsert, ``"D"`` delete), applied in row order. Validation either returns the
normalised set (columns cast to the table's types, ``_ord`` = row position added) or
raises ``ConfigError`` naming the first problem; nothing is written in that case.

Columns follow the table's schema versions (``firn.model.evolution``): a column a
schema change added may be missing (a producer still on the version before): its
rows take the column's default. A column the table dropped is refused, naming the
version that dropped it, unless the caller asked to ignore such columns
(``schema.ignore-dropped-columns``); a column's former name is refused naming its
new one; any other unknown column is refused (``Table.commit(merge_schema=True)``
adds it to the schema first).

Types are checked strictly: only the lossless widenings of ``firn.model.widening``
are implicit. Key values end up in the catalog (Postgres text and JSON, which
cannot hold NUL) and partition values in paths too, so a string key with a NUL
character, or a partition value that cannot be a path component
(``values.partition_problem``), is refused here rather than failing half-way
through a commit.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from firn.errors import ConfigError
from firn.model.evolution import added_since_creation, former_names
from firn.model.projection import filled
from firn.model.schema import TableSchema
from firn.model.values import partition_problem, partition_texts
from firn.model.widening import widens

UPSERT = "U"
DELETE = "D"
OP = "_op"
ORD = "_ord"


def reconcile_columns(
    table: TableSchema, rows: pa.Table, *, ignore_dropped: bool = False, extra: Sequence[str] = ()
) -> pa.Table:
    """``rows`` with the columns a schema change added and ``rows`` lacks filled
    with their defaults, and (``ignore_dropped``) columns the table dropped left out;
    ``ConfigError`` for a dropped or former column name otherwise. ``extra``: names
    that are not table columns but belong (``_op``). Other mismatches are left for
    the caller's check to report."""
    names = rows.column_names
    known = set(table.schema.names) | set(extra)
    unknown = [n for n in names if n not in known]
    if unknown:
        former = former_names(table)
        dropped = []
        for name in unknown:
            was = former.get(name)
            if was is None:
                continue
            if was.renamed_to is not None:
                raise ConfigError(
                    f"column {name!r} of table {table.name!r} was renamed to "
                    f"{was.renamed_to!r} in schema version {was.schema_id}; send it as "
                    f"{was.renamed_to!r}"
                )
            if not ignore_dropped:
                raise ConfigError(
                    f"column {name!r} was dropped from table {table.name!r} in schema version "
                    f"{was.schema_id} (the table is at version {table.schema_id}); stop sending "
                    "it, or set the table property schema.ignore-dropped-columns=true to have "
                    "it ignored"
                )
            dropped.append(name)
        if dropped:
            rows = rows.drop_columns(dropped)
    missing = [n for n in added_since_creation(table) if n not in rows.column_names]
    for name in missing:
        field = table.schema.field(name)
        rows = rows.append_column(field, filled(field, rows.num_rows))
    return rows


def validate_changes(
    table: TableSchema, changes: pa.Table, *, ignore_dropped: bool = False
) -> pa.Table:
    """The change set with its columns in table order, cast, and ``_ord`` appended."""
    if isinstance(changes, pa.RecordBatch):
        changes = pa.Table.from_batches([changes])
    if not isinstance(changes, pa.Table):
        raise ConfigError(f"changes must be a pyarrow.Table, got {type(changes).__name__}")
    changes = reconcile_columns(table, changes, ignore_dropped=ignore_dropped, extra=(OP,))
    expected = [*table.schema.names, OP]
    missing = [c for c in expected if c not in changes.column_names]
    extra = [c for c in changes.column_names if c not in expected]
    if missing or extra or len(set(changes.column_names)) != len(changes.column_names):
        hint = " (Table.commit(..., merge_schema=True) adds new columns)" if extra else ""
        raise ConfigError(
            f"change set columns must be the table's columns plus {OP!r}: "
            f"missing {missing}, unexpected {extra}{hint}"
        )
    ops = _ops(changes.column(OP))
    columns = _table_columns(table, changes, pc.equal(ops, UPSERT))
    ords = pa.array(range(changes.num_rows), pa.int64())
    return pa.Table.from_arrays(
        [*columns, ops, ords],
        schema=table.schema.append(pa.field(OP, pa.string(), nullable=False)).append(
            pa.field(ORD, pa.int64(), nullable=False)
        ),
    )


def validate_rows(table: TableSchema, rows: pa.Table, *, ignore_dropped: bool = False) -> pa.Table:
    """Whole rows (exactly the table's columns, no ``_op``), in table order and cast:
    what a bulk load writes. Checked like the upserts of a change set."""
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if not isinstance(rows, pa.Table):
        raise ConfigError(f"rows must be a pyarrow.Table, got {type(rows).__name__}")
    rows = reconcile_columns(table, rows, ignore_dropped=ignore_dropped)
    expected = table.schema.names
    missing = [c for c in expected if c not in rows.column_names]
    extra = [c for c in rows.column_names if c not in expected]
    if missing or extra or len(set(rows.column_names)) != len(rows.column_names):
        raise ConfigError(
            f"rows must have exactly the table's columns: missing {missing}, unexpected {extra}"
        )
    columns = _table_columns(table, rows, None)
    return pa.Table.from_arrays(columns, schema=table.schema)


def _table_columns(
    table: TableSchema, changes: pa.Table, upserts: pa.ChunkedArray | None
) -> list[pa.ChunkedArray]:
    """The table's columns of ``changes``, cast and checked; ``upserts`` marks the rows
    whose non-key columns must respect non-nullability (None: every row)."""
    columns = []
    for field in table.schema:
        column = _cast(changes.column(field.name), field)
        if column.null_count:
            if field.name in table.primary_key:
                raise ConfigError(f"key column {field.name!r} has nulls")
            nulls = column.is_null()
            if upserts is not None:
                nulls = pc.and_(upserts, nulls)
            if not field.nullable and pc.any(nulls).as_py():
                raise ConfigError(
                    f"column {field.name!r} is non-nullable but an upsert row has a null there"
                )
        if field.name in table.primary_key:
            _check_key_text(field.name, column)
        columns.append(column)
    _check_partitions(table, pa.Table.from_arrays(columns, schema=table.schema))
    return columns


def _ops(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if not (
        pa.types.is_string(column.type)
        or pa.types.is_large_string(column.type)
        or pa.types.is_dictionary(column.type)
    ):
        raise ConfigError(f"{OP!r} must be a string column, got {column.type}")
    column = column.cast(pa.string())
    if column.null_count:
        raise ConfigError(f"{OP!r} has nulls; every row must say {UPSERT!r} or {DELETE!r}")
    unknown = pc.unique(pc.filter(column, pc.invert(pc.is_in(column, pa.array([UPSERT, DELETE])))))
    if len(unknown):
        raise ConfigError(
            f"unknown {OP!r} values {unknown.to_pylist()[:5]}; "
            f"use {UPSERT!r} (upsert) or {DELETE!r} (delete)"
        )
    return column


def _cast(column: pa.ChunkedArray, field: pa.Field) -> pa.ChunkedArray:
    if column.type.equals(field.type):
        return column
    if not widens(column.type, field.type):
        raise ConfigError(
            f"column {field.name!r} has type {column.type}, which is not the table's "
            f"{field.type} nor a lossless widening of it (e.g. int32 to int64); "
            "cast it explicitly if that is what you mean"
        )
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ConfigError(
            f"column {field.name!r} has type {column.type}, which does not "
            f"convert safely to the table's {field.type}: {exc}"
        ) from exc


def _check_key_text(name: str, column: pa.ChunkedArray) -> None:
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return
    if pc.any(pc.match_substring(column, "\x00")).as_py():
        raise ConfigError(
            f"key column {name!r} has a value with a NUL character, which the catalog cannot store"
        )


def _check_partitions(table: TableSchema, columns: pa.Table) -> None:
    """Every distinct partition of the change set can be a path and a catalog row."""
    if not table.partition_by or columns.num_rows == 0:
        return
    parts = columns.select(list(table.partition_by))
    distinct = parts.group_by(list(table.partition_by), use_threads=False).aggregate([])
    for texts in partition_texts(distinct.select(list(table.partition_by))):
        problem = partition_problem(table.partition_by, texts)
        if problem is not None:
            raise ConfigError(problem)
