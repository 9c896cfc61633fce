"""Firn's table model in Iceberg's terms: schema, partition spec, partition values and
file locations.

Column names, types, docs and field ids are Firn's own (every column has a field id,
``firn.model.schema``, and every Parquet file Firn writes carries it), so an Iceberg
reader resolves the columns of a file of any schema version by id, as Firn does.
The Iceberg schema's id is the Firn schema version's. Partition columns become
identity partitions, with partition field ids from 1000 as Iceberg assigns them.
The primary key becomes the schema's identifier fields.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import PrimitiveType

from firn.errors import ConfigError
from firn.model.schema import TableSchema, field_id

FIRST_PARTITION_FIELD_ID = 1000
"""Iceberg's first partition field id (``PARTITION_FIELD_ID_START``)."""


def iceberg_schema(table: TableSchema, schema_id: int | None = None) -> Schema:
    """Version ``schema_id`` (default: the current one) of ``table`` as an Iceberg schema."""
    version = table.schema_id if schema_id is None else schema_id
    arrow = table.version_schema(version)
    try:
        converted = pyarrow_to_schema(arrow, downcast_ns_timestamp_to_us=True)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"table {table.name!r} has a column Iceberg cannot hold: {exc}") from exc
    identifiers = [
        converted.find_field(name).field_id
        for name in table.primary_key
        if name in arrow.names and converted.find_field(name).required
    ]
    if len(identifiers) != len(table.primary_key):
        identifiers = []  # Iceberg's identifier fields must all be required
    return Schema(*converted.fields, schema_id=version, identifier_field_ids=identifiers)


def partition_spec(table: TableSchema, schema: Schema) -> PartitionSpec:
    """Identity partitions on the table's partition columns (spec id 0)."""
    return PartitionSpec(
        *(
            PartitionField(
                source_id=schema.find_field(column).field_id,
                field_id=FIRST_PARTITION_FIELD_ID + i,
                transform=IdentityTransform(),
                name=column,
            )
            for i, column in enumerate(table.partition_by)
        ),
        spec_id=0,
    )


def partition_record(table: TableSchema, texts: Mapping[str, str]) -> Record:
    """A partition's values (their text form, as the catalog keeps them) in Iceberg's
    representation: dates as days, timestamps as microseconds since the epoch."""
    return Record(
        *(
            _iceberg_value(texts[column], table.schema.field(column).type)
            for column in table.partition_by
        )
    )


def _iceberg_value(text: str | None, type_: pa.DataType) -> Any:
    if text is None:
        return None
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return bytes.fromhex(text)
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return text
    value = pa.array([text], pa.string()).cast(type_)[0].as_py()
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, (bool, int, float, Decimal)):
        return value
    raise ConfigError(f"partition values of type {type_} cannot be published to Iceberg")


def key_bounds(
    table: TableSchema, schema: Schema, low: Sequence[Any] | None, high: Sequence[Any] | None
) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """A file's column bounds from its key range (the catalog's min/max key), so an
    engine skips files by key: the first key column is bounded by the range's ends,
    and each next one too while the ones before are equal at both ends (a leading
    partition column always is)."""
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    if low is None or high is None:
        return lower, upper
    for column, lo, hi in zip(table.primary_key, low, high, strict=False):
        type_ = table.schema.field(column).type
        a, b = _bound(lo, type_), _bound(hi, type_)
        if a is None or b is None:
            break
        field = schema.find_field(column)
        if not isinstance(field.field_type, PrimitiveType):
            break
        lower[field.field_id] = to_bytes(field.field_type, a)
        upper[field.field_id] = to_bytes(field.field_type, b)
        if lo != hi:
            break
    return lower, upper


def _bound(value: Any, type_: pa.DataType) -> Any:
    """A JSON key value (``firn.model.values``) as Iceberg's bound, or None."""
    if value is None:
        return None
    if pa.types.is_integer(type_) or pa.types.is_string(type_) or pa.types.is_date32(type_):
        return value
    if pa.types.is_large_string(type_):
        return value
    if pa.types.is_decimal(type_):
        return Decimal(value)
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return bytes.fromhex(value)
    if pa.types.is_timestamp(type_) and type_.unit == "us":
        return value
    return None  # other units would need rounding outward: no bound


def lacks_defaults(table: TableSchema, schema_id: int) -> bool:
    """Whether files of version ``schema_id`` lack a column with a default other than
    null: Firn reads them with the default, an Iceberg v2 reader would read null (v2
    has no initial defaults), so the publisher publishes a rewritten copy of them."""
    if schema_id == table.schema_id:
        return False
    ids = {field_id(f) for f in table.version_schema(schema_id)}
    return any(field_id(f) not in ids and table.default(f.name) is not None for f in table.schema)
