"""Changing a table's schema (design §2): the operations of ``Table.update_schema()``,
checked and applied to a ``TableSchema`` as one new version, or refused with nothing
changed.

The operations follow pyiceberg's ``UpdateSchema``: add, delete, rename, update
(widen a type, make a column optional, set its doc) and move. They apply in the order
given, each to the result of the ones before, so ``rename_column("a", "b")`` then
``update_column("b", ...)`` works, and a column deleted and added again under its old
name is a new column with a new field id. ``apply`` checks the result against every
rule a new table obeys and returns the next version, or the same definition when the
block changed nothing.

What is refused, and why:

- dropping, retyping or making optional a primary key or partition column: every
  file, hash node and partition path is laid out by them (a new layout is a new
  table: see docs/guide/tables.md);
- renaming a partition column: its name is part of every partition's path;
- a type change that is not a lossless widening (``WIDENINGS``); timestamps keep
  their unit (an old value may not fit a finer one);
- optional -> required: rows written before may hold nulls;
- a required column added without a default: rows written before have no value;
- a default that is not a value of the column's type; names reserved, duplicated or
  malformed as at creation.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import pyarrow as pa

from firn.errors import ConfigError
from firn.model.projection import default_scalar
from firn.model.schema import (
    DEFAULT,
    DOC,
    TableSchema,
    check_column_name,
    default_json,
    field_id,
    is_value_type,
    with_field_id,
)
from firn.model.values import column_to_json
from firn.model.widening import widens

WIDENINGS = (
    "int8 -> int16 -> int32 -> int64 (and unsigned to a wider signed or unsigned int)",
    "float16 -> float32 -> float64",
    "decimal128(p, s) -> decimal128(p', s') with s' >= s and p' - s' >= p - s",
    "string <-> large_string, binary <-> large_binary",
    "date32 -> date64",
)
"""The type changes ``update_column`` takes (docs/guide/tables.md lists them)."""


def widens_in_place(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value a column of type ``old`` holds reads back as the same value
    of type ``new``: the widenings change sets take (``firn.model.widening``), but a
    timestamp keeps its unit (an old value may not fit a finer one). A type the
    result cannot have (``string_view``, ...) is refused by the definition's check."""
    if pa.types.is_timestamp(old):
        return bool(old.equals(new))
    return widens(old, new)


def encode_default(name: str, value: Any, type_: pa.DataType) -> Any:
    """``value`` as a default of a ``type_`` column, in its JSON form; ``ConfigError``
    when it is not a value of that type."""
    try:
        array = pa.array([value], type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
        raise ConfigError(
            f"default {value!r} of column {name!r} is not a value of its type {type_}: {exc}"
        ) from exc
    if array.null_count:
        return None
    if pa.types.is_boolean(type_) or pa.types.is_floating(type_):
        encoded = array.to_pylist()[0]
    else:
        encoded = column_to_json(array)[0]
    return encoded


@dataclass
class WorkingColumn:
    fid: int
    field: pa.Field

    @property
    def name(self) -> str:
        return str(self.field.name)


class SchemaChange:
    """The operations of one ``update_schema()`` block, applied in order to a working
    copy of the columns; ``apply`` makes the new version."""

    def __init__(self, current: TableSchema) -> None:
        self.current = current
        self._columns = [WorkingColumn(current.field_id(f.name), f) for f in current.schema]
        self._key = list(current.primary_key)
        self._next_id = current.last_column_id + 1
        self.operations: list[str] = []
        """What the block did, in words (the history shows them)."""

    # -- lookups -----------------------------------------------------------------

    def _find(self, name: str) -> WorkingColumn:
        if not isinstance(name, str):
            raise ConfigError(f"a column is named by a string, got {type(name).__name__}")
        for column in self._columns:
            if column.name == name:
                return column
        raise ConfigError(
            f"table {self.current.name!r} has no column {name!r} "
            f"(columns: {[c.name for c in self._columns]})"
        )

    def _index(self, name: str) -> int:
        column = self._find(name)
        return self._columns.index(column)

    def _free(self, name: str) -> None:
        check_column_name(name)
        if any(c.name == name for c in self._columns):
            raise ConfigError(f"table {self.current.name!r} already has a column {name!r}")

    def _layout_column(self, name: str, what: str) -> None:
        if name in self.current.partition_by:
            raise ConfigError(
                f"cannot {what} {name!r}: it is a partition column (changing the partitioning "
                "is a rewrite into a new table; see the schema evolution guide)"
            )
        if name in self._key:
            raise ConfigError(
                f"cannot {what} {name!r}: it is a primary key column (changing the key is a "
                "rewrite into a new table; see the schema evolution guide)"
            )

    # -- operations --------------------------------------------------------------

    def add_column(
        self,
        name: str,
        field_type: pa.DataType,
        default: Any = None,
        doc: str | None = None,
        *,
        required: bool = False,
    ) -> Self:
        """A new column, last; rows written before it existed read as ``default``."""
        self._free(name)
        if not isinstance(field_type, pa.DataType):
            raise ConfigError(
                f"column {name!r}: the type must be a pyarrow type, got {field_type!r}"
            )
        if not is_value_type(field_type):
            raise ConfigError(f"column {name!r} has unsupported type {field_type}")
        encoded = None if default is None else encode_default(name, default, field_type)
        if required and encoded is None:
            raise ConfigError(
                f"cannot add required column {name!r} without a default: rows written "
                "before it have no value for it"
            )
        metadata: dict[bytes, bytes] = {}
        if doc is not None:
            metadata[DOC] = _doc(name, doc)
        if encoded is not None:
            metadata[DEFAULT] = json.dumps(encoded).encode()
        field = pa.field(name, field_type, nullable=not required, metadata=metadata or None)
        self._columns.append(WorkingColumn(self._next_id, with_field_id(field, self._next_id)))
        self._next_id += 1
        self.operations.append(f"add {name} {field_type}")
        return self

    def delete_column(self, name: str) -> Self:
        """Drop a column: reads no longer return it (its id is never reused)."""
        self._layout_column(name, "delete column")
        column = self._find(name)
        if len(self._columns) == 1:
            raise ConfigError(f"cannot delete {name!r}: it is the table's only column")
        self._columns.remove(column)
        self.operations.append(f"delete {name}")
        return self

    def rename_column(self, name: str, new_name: str) -> Self:
        """The same column (same id, same values) under another name."""
        if name in self.current.partition_by:
            raise ConfigError(
                f"cannot rename {name!r}: it is a partition column, and its name is part of "
                "every partition's path"
            )
        column = self._find(name)
        if new_name == name:
            return self
        self._free(new_name)
        column.field = column.field.with_name(new_name)
        self._key = [new_name if k == name else k for k in self._key]
        self.operations.append(f"rename {name} -> {new_name}")
        return self

    def update_column(
        self,
        name: str,
        field_type: pa.DataType | None = None,
        required: bool | None = None,
        doc: str | None = None,
    ) -> Self:
        """Widen a column's type losslessly, make it optional, or set its doc."""
        column = self._find(name)
        field = column.field
        if field_type is not None and not field.type.equals(field_type):
            if not isinstance(field_type, pa.DataType):
                raise ConfigError(f"column {name!r}: the type must be a pyarrow type")
            self._layout_column(name, "change the type of")
            if not widens_in_place(field.type, field_type):
                raise ConfigError(
                    f"cannot change column {name!r} from {field.type} to {field_type}: only "
                    f"lossless widenings are allowed ({'; '.join(WIDENINGS)})"
                )
            field = _with_type(field, field_type)
            self.operations.append(f"widen {name} to {field_type}")
        if required is not None and required == field.nullable:
            if required:
                raise ConfigError(
                    f"cannot make column {name!r} required: rows written before may hold nulls"
                )
            self._layout_column(name, "make optional")
            field = field.with_nullable(True)
            self.operations.append(f"make {name} optional")
        if doc is not None:
            field = field.with_metadata({**(field.metadata or {}), DOC: _doc(name, doc)})
            self.operations.append(f"doc {name}")
        column.field = field
        return self

    def move_first(self, name: str) -> Self:
        column = self._find(name)
        self._columns.remove(column)
        self._columns.insert(0, column)
        self.operations.append(f"move {name} first")
        return self

    def move_after(self, name: str, after: str) -> Self:
        return self._move(name, after, 1)

    def move_before(self, name: str, before: str) -> Self:
        return self._move(name, before, 0)

    def _move(self, name: str, other: str, offset: int) -> Self:
        if name == other:
            raise ConfigError(f"cannot move column {name!r} relative to itself")
        column = self._find(name)
        self._find(other)
        self._columns.remove(column)
        self._columns.insert(self._index(other) + offset, column)
        self.operations.append(f"move {name} {'after' if offset else 'before'} {other}")
        return self

    # -- the result ----------------------------------------------------------------

    @property
    def changed(self) -> bool:
        schema = pa.schema([c.field for c in self._columns])
        return not schema.equals(self.current.schema, check_metadata=True)

    def apply(self) -> TableSchema:
        """The next version (``current`` itself when nothing changed); ``ConfigError``
        if the result breaks a rule of table definitions."""
        if not self.changed:
            return self.current
        schema = pa.schema([c.field for c in self._columns])
        result = dataclasses.replace(
            self.current,
            schema=schema,
            primary_key=tuple(self._key),
            schema_id=self.current.schema_id + 1,
            earlier=tuple(
                sorted(
                    {
                        **dict(self.current.earlier),
                        self.current.schema_id: self.current.schema,
                    }.items()
                )
            ),
            last_column_id=self._next_id - 1,
        )
        result.check()
        ids = [field_id(f) for f in result.schema]
        assert len(set(ids)) == len(ids), ids
        return result


def _with_type(field: pa.Field, type_: pa.DataType) -> pa.Field:
    """``field`` with a wider type, its default re-encoded for it (a date32 default
    is days; as a date64 it must be milliseconds)."""
    widened = pa.field(field.name, type_, field.nullable, field.metadata)
    value = default_json(field)
    if value is None:
        return widened
    scalar = default_scalar(value, field.type).cast(type_)
    encoded = encode_default(field.name, scalar.as_py(), type_)
    return widened.with_metadata({**(field.metadata or {}), DEFAULT: json.dumps(encoded).encode()})


def _doc(name: str, doc: str) -> bytes:
    if not isinstance(doc, str):
        raise ConfigError(f"the doc of column {name!r} must be a string")
    return doc.encode()


@dataclass(frozen=True)
class FormerName:
    """A column name the table no longer has: what became of it, and when."""

    name: str
    field_id: int
    schema_id: int
    """The first version without the name."""
    renamed_to: str | None
    """The column's name now, when it was renamed; None when it was dropped."""


def former_names(table: TableSchema) -> dict[str, FormerName]:
    """Names used by an earlier version that the current one does not have."""
    current = {field_id(f): f.name for f in table.schema}
    versions = table.versions()
    out: dict[str, FormerName] = {}
    ordered = sorted(versions)
    for before, after in itertools.pairwise(ordered):
        after_names = set(versions[after].names)
        for f in versions[before]:
            if f.name in after_names or f.name in table.schema.names:
                continue
            fid = field_id(f)
            assert fid is not None
            out[f.name] = FormerName(f.name, fid, after, current.get(fid))
    return out


def added_since_creation(table: TableSchema) -> set[str]:
    """Columns a schema change added (the table was not created with them)."""
    versions = table.versions()
    first = {field_id(f) for f in versions[min(versions)]}
    return {f.name for f in table.schema if field_id(f) not in first}


def new_columns(table: TableSchema, schema: pa.Schema, extra: Sequence[str] = ()) -> list[pa.Field]:
    """The columns of ``schema`` (a change set's) that the table has never had, as
    the nullable fields ``merge_schema`` adds (a dictionary column as its values'
    type). A dropped or former name is not new (validation reports it); ``extra``:
    names that belong without being columns (``_op``)."""
    known = set(table.schema.names) | set(extra) | set(former_names(table))
    out = []
    for field in schema:
        if field.name in known:
            continue
        type_ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if pa.types.is_null(type_):
            raise ConfigError(
                f"new column {field.name!r} holds only nulls, so its type is unknown: add it "
                "with Table.update_schema() first"
            )
        out.append(pa.field(field.name, type_, nullable=True))
    return out
