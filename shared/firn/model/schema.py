"""What a table is: its Arrow schema, primary key, partition columns, and the rules
they obey (design §2). Everything is checked before anything is written.

Names are matched whole (``fullmatch``: a ``$`` would let ``"abc\\n"`` through). Column
names are free text but for control characters and a length bound; a partition
column's name also becomes part of every partition's path (``values.py``), so it is
kept short enough that a partition value of ``MAX_PARTITION_VALUE_BYTES`` still fits
one path component. A timestamp's time zone must be one both Python (``zoneinfo``)
and Arrow know, or a fixed offset ``+HH:MM``: Arrow stores any string, and an unknown
zone would only fail later, when the table is read.

Every column has a *field id* (design §2, schema evolution): a number given when the
column is created, never changed by a rename, a widening or a move, and never given
to another column, even after this one is dropped. It travels in the Arrow field's
metadata under ``PARQUET:field_id``, the key pyarrow writes into Parquet's own
``field_id``, so every data file says which column each of its columns is; the
column's ``doc`` and its default (``firn.default``: the value, in the JSON form of
``firn.model.values``, that rows written before the column existed read as) travel
beside it. A table created before field ids existed gets 1, 2, ... in column order,
which is what its files have always meant.

A table's schema changes in *versions* (``schema_id`` 0, 1, ...; ``firn.model.evolution``
makes them). Each data file records the version it was written under, and
``TableSchema.earlier`` holds the Arrow schemas of the other versions, so a file of
any version is read by field id into the current one (``firn.model.projection``).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import re
import unicodedata
import zoneinfo
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from firn.errors import ConfigError
from firn.model.values import MAX_PARTITION_VALUE_BYTES, MAX_PATH_COMPONENT_BYTES, path_text

FIELD_ID = b"PARQUET:field_id"
"""Field metadata key of a column's field id (what pyarrow writes as Parquet's)."""
DOC = b"doc"
"""Field metadata key of a column's description (pyiceberg's too)."""
DEFAULT = b"firn.default"
"""Field metadata key of a column's default, as JSON (``firn.model.values``)."""

RESERVED = ("_op", "_ord", "_seq")
"""Column names Firn uses in change files; a table may not use them."""

MAX_COLUMN_NAME = 128
"""Characters in a column name."""
MAX_PARTITION_NAME_BYTES = MAX_PATH_COMPONENT_BYTES - MAX_PARTITION_VALUE_BYTES - 1
"""Bytes of a partition column's percent-encoded name: ``name=`` plus a plain value
of ``MAX_PARTITION_VALUE_BYTES`` fit one path component."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,127}")
_FIXED_OFFSET = re.compile(r"[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]")


def is_key_type(t: pa.DataType) -> bool:
    """Types the key hash supports and whose equality is exact (no floats)."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal128(t)
    )


def is_value_type(t: pa.DataType) -> bool:
    """Types a non-key column may have: the key types plus booleans and floats."""
    return bool(is_key_type(t) or pa.types.is_boolean(t) or pa.types.is_floating(t))


def _column_list(kind: str, columns: Sequence[str], names: list[str]) -> tuple[str, ...]:
    """``columns`` as a tuple, checked to be distinct names of the schema."""
    if isinstance(columns, str):
        raise ConfigError("primary_key and partition_by are sequences of column names")
    listed = tuple(columns)
    if len(set(listed)) != len(listed):
        raise ConfigError(f"duplicate {kind} columns {listed}")
    for column in listed:
        if column not in names:
            raise ConfigError(f"{kind} column {column!r} is not in the schema")
    return listed


def check_column_name(name: str) -> None:
    if name in RESERVED or name.startswith("_firn"):
        raise ConfigError(f"column name {name!r} is reserved")
    if not name or len(name) > MAX_COLUMN_NAME:
        raise ConfigError(f"column name {name!r} must have 1 to {MAX_COLUMN_NAME} characters")
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in name):
        raise ConfigError(f"column name {name!r} has a control character (NUL, newline, ...)")


def _check_time_zone(column: str, type_: pa.TimestampType) -> None:
    zone = type_.tz
    if _FIXED_OFFSET.fullmatch(zone):
        return
    problem = None
    try:
        zoneinfo.ZoneInfo(zone)
        # What read() does with the column: Arrow must find the zone too.
        sample = pa.array([0], pa.int64()).cast(type_)
        sample.cast(pa.string())
        sample.to_pylist()
    except (ValueError, KeyError, OSError, pa.ArrowException) as exc:
        problem = exc
    if problem is not None:
        raise ConfigError(
            f"column {column!r} has an unknown time zone {zone!r}: use an IANA name "
            "such as 'UTC' or 'Europe/Paris', or a fixed offset such as '+05:30'"
        ) from problem


def field_id(field: pa.Field) -> int | None:
    """The field id a column carries, or None."""
    meta = field.metadata or {}
    raw = meta.get(FIELD_ID)
    return None if raw is None else int(raw)


def with_field_id(field: pa.Field, fid: int) -> pa.Field:
    """``field`` carrying field id ``fid`` (its other metadata kept)."""
    meta = dict(field.metadata or {})
    meta[FIELD_ID] = str(fid).encode()
    return field.with_metadata(meta)


def default_json(field: pa.Field) -> Any:
    """A column's default in its JSON form (``None``: it has none, rows lacking it are null)."""
    raw = (field.metadata or {}).get(DEFAULT)
    return None if raw is None else json.loads(raw)


def with_ids(schema: pa.Schema, first: int = 1) -> pa.Schema:
    """``schema`` with a field id on every column: those it has kept, the others
    numbered ``first``, ``first + 1``, ... in column order (a table made before field
    ids existed: its columns are 1, 2, ... as they always were)."""
    if all(field_id(f) is not None for f in schema):
        return schema
    taken = {field_id(f) for f in schema} - {None}
    next_id = max([first - 1, *(i for i in taken if i is not None)]) + 1
    fields = []
    for f in schema:
        if field_id(f) is None:
            fields.append(with_field_id(f, next_id))
            next_id += 1
        else:
            fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


@dataclass(frozen=True)
class TableSchema:
    """A validated table definition (without its properties), at one schema version."""

    name: str
    schema: pa.Schema
    """The columns, each with its field id (``FIELD_ID``) and any doc and default."""
    primary_key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    schema_id: int = 0
    """This version's number (0: as created)."""
    earlier: tuple[tuple[int, pa.Schema], ...] = ()
    """The Arrow schema of every other version whose files a read may meet: a file
    written under version ``v`` stores the columns of ``v`` by their names then."""
    last_column_id: int = 0
    """The greatest field id ever given (dropped columns included), so a new
    column never reuses one; at least the greatest id in ``schema``."""

    def __post_init__(self) -> None:
        schema = with_ids(self.schema)
        if schema is not self.schema:
            object.__setattr__(self, "schema", schema)
        # A version stored before field ids existed (the first of an old table) means
        # 1, 2, ... in column order, like the schema itself.
        earlier = tuple((sid, with_ids(s)) for sid, s in self.earlier)
        if any(a is not b for (_, a), (_, b) in zip(earlier, self.earlier, strict=True)):
            object.__setattr__(self, "earlier", earlier)
        most = max((field_id(f) or 0 for f in schema), default=0)
        if self.last_column_id < most:
            object.__setattr__(self, "last_column_id", most)

    @property
    def keyed(self) -> bool:
        return bool(self.primary_key)

    @property
    def key_schema(self) -> pa.Schema:
        return pa.schema([self.schema.field(name) for name in self.primary_key])

    def field_id(self, name: str) -> int:
        """The field id of column ``name`` (``KeyError`` if there is none)."""
        fid = field_id(self.schema.field(name))
        assert fid is not None  # __post_init__ numbered every column
        return fid

    def default(self, name: str) -> Any:
        """Column ``name``'s default, JSON form (None: null)."""
        return default_json(self.schema.field(name))

    def version_schema(self, schema_id: int) -> pa.Schema:
        """The columns files of version ``schema_id`` were written with."""
        if schema_id == self.schema_id:
            return self.schema
        for sid, schema in self.earlier:
            if sid == schema_id:
                return schema
        raise ConfigError(
            f"table {self.name!r}: a file was written under schema version {schema_id}, "
            f"which this reader (version {self.schema_id}) does not know"
        )

    def at_version(self, schema_id: int) -> TableSchema:
        """This table as of version ``schema_id``: the columns (and key names) files of
        that version were written with."""
        if schema_id == self.schema_id:
            return self
        schema = self.version_schema(schema_id)
        names = {field_id(f): f.name for f in schema}
        key = tuple(names[self.field_id(k)] for k in self.primary_key)
        return dataclasses.replace(self, schema=schema, primary_key=key, schema_id=schema_id)

    def versions(self) -> dict[int, pa.Schema]:
        """Every version this definition can read files of, by id."""
        return {**dict(self.earlier), self.schema_id: self.schema}

    def with_earlier(self, versions: Mapping[int, pa.Schema]) -> TableSchema:
        """This definition, able to read files of ``versions`` too (its own omitted)."""
        earlier = tuple(sorted((k, v) for k, v in versions.items() if k != self.schema_id))
        return dataclasses.replace(self, earlier=earlier)

    def narrowed(self, names: Sequence[str]) -> TableSchema:
        """Only the columns ``names`` (kept in table order), ids and versions kept."""
        wanted = set(names)
        fields = [f for f in self.schema if f.name in wanted]
        return dataclasses.replace(self, schema=pa.schema(fields))

    @classmethod
    def build(
        cls,
        name: str,
        schema: pa.Schema,
        primary_key: Sequence[str],
        partition_by: Sequence[str] = (),
    ) -> TableSchema:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(
                f"table name {name!r} must start with a letter and use only "
                "letters, digits, '_', '.', '-' (at most 128)"
            )
        if not isinstance(schema, pa.Schema):
            raise ConfigError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
        names = schema.names
        if len(set(names)) != len(names):
            raise ConfigError(f"duplicate column names in {names}")
        for field in schema:
            check_column_name(field.name)
            if not is_value_type(field.type):
                raise ConfigError(f"column {field.name!r} has unsupported type {field.type}")
            if pa.types.is_timestamp(field.type) and field.type.tz is not None:
                _check_time_zone(field.name, field.type)
        key = _column_list("primary key", primary_key, names)
        for column in key:
            field = schema.field(column)
            if field.nullable:
                raise ConfigError(
                    f"primary key column {column!r} must be declared "
                    "non-nullable (pa.field(..., nullable=False))"
                )
            if not is_key_type(field.type):
                raise ConfigError(
                    f"primary key column {column!r} has type {field.type}, "
                    "which cannot be a key (floats and booleans cannot)"
                )
        parts = _column_list("partition", partition_by, names)
        for column in parts:
            if len(path_text(column)) > MAX_PARTITION_NAME_BYTES:
                raise ConfigError(
                    f"partition column name {column!r} is too long for a path: at most "
                    f"{MAX_PARTITION_NAME_BYTES} bytes once percent-encoded"
                )
            if key and column not in key:
                raise ConfigError(
                    f"partition column {column!r} must be part of the primary "
                    "key, so that a key never moves between partitions"
                )
            if not is_key_type(schema.field(column).type):
                raise ConfigError(
                    f"partition column {column!r} has unsupported type {schema.field(column).type}"
                )
        return cls(name, with_ids(schema_without_ids(schema)), key, parts)

    def check(self) -> None:
        """``ConfigError`` unless this definition obeys every rule ``build`` checks
        (what a schema change must keep true)."""
        TableSchema.build(self.name, self.schema, self.primary_key, self.partition_by)

    def to_ipc(self) -> bytes:
        return bytes(self.schema.serialize().to_pybytes())

    @staticmethod
    def schema_from_ipc(data: bytes) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(data))

    def to_dict(self, versions: Collection[int] | None = None) -> dict[str, Any]:
        """The JSON form (a task spec carries it to executors): Arrow schemas as
        base64 IPC. ``versions``: the earlier versions to keep (default: all)."""
        earlier = [
            [sid, _b64(schema)]
            for sid, schema in self.earlier
            if versions is None or sid in versions
        ]
        return {
            "name": self.name,
            "schema_id": self.schema_id,
            "schema": _b64(self.schema),
            "primary_key": list(self.primary_key),
            "partition_by": list(self.partition_by),
            "last_column_id": self.last_column_id,
            "earlier": earlier,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableSchema:
        """Back from ``to_dict``'s form."""
        return cls(
            name=str(data["name"]),
            schema=_from_b64(data["schema"]),
            primary_key=tuple(data["primary_key"]),
            partition_by=tuple(data["partition_by"]),
            schema_id=int(data["schema_id"]),
            earlier=tuple((int(sid), _from_b64(text)) for sid, text in data["earlier"]),
            last_column_id=int(data["last_column_id"]),
        )


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a table's schema."""

    schema_id: int
    snapshot_id: int
    """The snapshot it began at (0: as the table was created)."""
    created_at: dt.datetime | None
    changes: tuple[str, ...]
    """What the change did, in words (empty for the first version)."""
    definition: TableSchema

    @property
    def schema(self) -> pa.Schema:
        return self.definition.schema


def _b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def _from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def schema_without_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` with no field ids: a new table numbers its columns afresh, whatever
    ids the caller's schema carried (another table's, say)."""
    fields = []
    for f in schema:
        meta = {k: v for k, v in (f.metadata or {}).items() if k != FIELD_ID}
        fields.append(f.with_metadata(meta) if meta else f.remove_metadata())
    return pa.schema(fields, metadata=schema.metadata)
