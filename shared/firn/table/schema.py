"""What a table is: its Arrow schema, primary key, partition columns, and the rules
they obey (SPEC 2). Everything is checked before anything is written."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from firn.errors import ConfigError

RESERVED = ("_op", "_ord", "_seq")
"""Column names Firn uses in change files; a table may not use them."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,127}$")


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
        if not isinstance(name, str) or not _NAME.match(name):
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
            if field.name in RESERVED or field.name.startswith("_firn"):
                raise ConfigError(f"column name {field.name!r} is reserved")
            if not is_value_type(field.type):
                raise ConfigError(f"column {field.name!r} has unsupported type {field.type}")
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
