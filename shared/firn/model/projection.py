"""Reading a data file written under one schema version as another (design §2).

A file stores the columns of the version it was written under, by their names then;
each column carries its field id. A read wants the columns of its own version. The
two are matched by field id, never by name, so:

- a column renamed since is read under its old name and returned under the new one;
- a column widened since (int32 -> int64, ...) is read as stored and cast;
- a column added since, which the file lacks, is filled with its default (null when
  it has none);
- a column dropped since is not read at all; a column dropped and then added again
  under the same name has a new id, so the file's old values are not taken for it.

Columns without a field id (``_ord``, ``_seq``: Firn's own) are matched by name.

This module is pure pyarrow: the merge kernel imports it on executors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import pyarrow as pa

from firn.model.schema import default_json, field_id
from firn.model.values import from_json

RecordRows = TypeVar("RecordRows", pa.RecordBatch, pa.Table)


def default_scalar(value: Any, type_: pa.DataType) -> pa.Scalar:
    """A default in its JSON form (``firn.model.values``) as an Arrow scalar of ``type_``."""
    if value is None:
        return pa.scalar(None, type_)
    if pa.types.is_date32(type_):
        return pa.scalar(int(value), pa.int32()).cast(type_)
    if pa.types.is_date64(type_) or pa.types.is_timestamp(type_):
        return pa.scalar(int(value), pa.int64()).cast(type_)
    return pa.scalar(from_json(value, type_), type_)


def filled(field: pa.Field, rows: int) -> pa.Array:
    """``rows`` copies of ``field``'s default (nulls when it has none)."""
    value = default_json(field)
    if value is None:
        return pa.nulls(rows, field.type)
    return pa.repeat(default_scalar(value, field.type), rows)


@dataclass(frozen=True)
class FileView:
    """How to read files of one version as columns of another."""

    stored: pa.Schema
    """What to read from the file: for each wanted column the file has, its field as
    the file stores it (old name, old type, the non-null flag it had then)."""
    target: pa.Schema
    """What the rows become."""

    @property
    def identity(self) -> bool:
        """Whether the file's columns are already the target's (nothing to adapt)."""
        return bool(self.stored.equals(self.target))

    def adapt(self, rows: RecordRows) -> RecordRows:
        """``rows`` read with ``stored`` (or some of its columns), as ``target``
        columns: a table column the rows lack takes its default; one of Firn's own
        columns (no field id) the rows lack is left out, as a file lacking it reads."""
        if self.identity:
            return rows
        by_name = {name: i for i, name in enumerate(rows.schema.names)}
        columns = []
        fields = []
        for field, source in zip(self.target, self.sources, strict=True):
            if source is None or source not in by_name:
                if field_id(field) is None:
                    continue
                columns.append(filled(field, rows.num_rows))
            else:
                column = rows.column(by_name[source])
                if not column.type.equals(field.type):
                    column = column.cast(field.type)
                columns.append(column)
            fields.append(field)
        schema = pa.schema(fields)
        adapted: RecordRows = type(rows).from_arrays(columns, schema=schema)
        return adapted

    @cached_property
    def sources(self) -> tuple[str | None, ...]:
        """For each target column, the file's name for it (None: the file lacks it)."""
        by_id = {field_id(f): f.name for f in self.stored if field_id(f) is not None}
        plain = {f.name for f in self.stored if field_id(f) is None}
        out: list[str | None] = []
        for field in self.target:
            fid = field_id(field)
            if fid is None:
                out.append(field.name if field.name in plain else None)
            else:
                out.append(by_id.get(fid))
        return tuple(out)


def file_view(file_schema: pa.Schema, target: pa.Schema) -> FileView:
    """How a file written with ``file_schema`` (a version's columns) is read as
    ``target`` (columns of another version, possibly with Firn's ``_ord``/``_seq``)."""
    by_id = {field_id(f): f for f in file_schema if field_id(f) is not None}
    stored = []
    for field in target:
        fid = field_id(field)
        if fid is None:
            stored.append(field)  # Firn's own columns are stored under their names
        elif fid in by_id:
            old = by_id[fid]
            stored.append(old.with_metadata(field.metadata))
    return FileView(pa.schema(stored), target)


def stored_names(view: FileView, wanted: Sequence[str]) -> list[str]:
    """The file's names for the target columns ``wanted`` that it stores (Firn's own
    columns under their names: the file may have them)."""
    source = dict(zip(view.target.names, view.sources, strict=True))
    return [s for s in (source[name] for name in wanted) if s is not None]
