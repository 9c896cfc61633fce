"""What a table is: its Arrow schema, primary key, partition columns, and the rules
they obey (SPEC 2). Everything is checked before anything is written.

Names are matched whole (``fullmatch``: a ``$`` would let ``"abc\\n"`` through). Column
names are free text but for control characters and a length bound; a partition
column's name also becomes part of every partition's path (``values.py``), so it is
kept short enough that a partition value of ``MAX_PARTITION_VALUE_BYTES`` still fits
one path component. A timestamp's time zone must be one both Python (``zoneinfo``)
and Arrow know, or a fixed offset ``+HH:MM``: Arrow stores any string, and an unknown
zone would only fail later, when the table is read.
"""

from __future__ import annotations

import re
import unicodedata
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from firn.errors import ConfigError
from firn.model.values import MAX_PARTITION_VALUE_BYTES, MAX_PATH_COMPONENT_BYTES, path_text

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


def _check_column_name(name: str) -> None:
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


@dataclass(frozen=True)
class TableSchema:
    """A validated table definition (without its properties)."""

    name: str
    schema: pa.Schema
    primary_key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()

    @property
    def keyed(self) -> bool:
        return bool(self.primary_key)

    @property
    def key_schema(self) -> pa.Schema:
        return pa.schema([self.schema.field(name) for name in self.primary_key])

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
            _check_column_name(field.name)
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
        return cls(name, schema, key, parts)

    def to_ipc(self) -> bytes:
        return bytes(self.schema.serialize().to_pybytes())

    @staticmethod
    def schema_from_ipc(data: bytes) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(data))
