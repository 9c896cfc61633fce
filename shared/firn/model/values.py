"""Key and partition values outside Arrow: as JSON in the catalog, as path segments.

The catalog stores each file's min/max key as JSON; the planner compares key ranges
in Python, so the JSON form must decode to values that order exactly as Arrow sorts
the key columns, and must be exact for every key type:

    integers                   JSON numbers
    dates, timestamps          their physical integer (days, or units since the
                               epoch in the column's unit), exact even for ns
    decimals                   decimal strings, decoded to ``Decimal``
    strings                    JSON strings (code point order = UTF-8 byte order)
    binaries                   hex strings, decoded to ``bytes``

A partition is addressed by a Hive-style path ``col=value/col2=value`` (``""`` when
the table is unpartitioned); values are Arrow's text form (binaries in hex),
percent-escaped so any value is safe in a path on every file system (``/`` becomes
``%2F``, so a value never adds a directory level). The catalog keeps the path and
the text form in Postgres, which cannot store NUL, and a path component is at most
255 bytes on common file systems, hence ``partition_problem``'s limits: no NUL, at
most ``MAX_PARTITION_VALUE_BYTES`` of text, each ``col=value`` within
``MAX_PATH_COMPONENT_BYTES`` once escaped (escaping triples a byte outside
``A-Za-z0-9_.-~``), the whole path within ``MAX_PARTITION_PATH_BYTES`` (an S3 key is
at most 1024 bytes, and the table's location and file names need room too).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import pyarrow as pa

MAX_PARTITION_VALUE_BYTES = 200
"""UTF-8 bytes of one partition value's text form."""
MAX_PATH_COMPONENT_BYTES = 255
"""Bytes of one escaped ``col=value`` path component."""
MAX_PARTITION_PATH_BYTES = 512
"""Bytes of a whole escaped partition path."""

KeyTuple = tuple[Any, ...]
"""A key as comparable Python values, in primary-key order (see the module doc)."""


def _is_temporal(t: pa.DataType) -> bool:
    return bool(pa.types.is_date(t) or pa.types.is_timestamp(t))


def _is_binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


def column_to_json(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Every value of a key column in its JSON form."""
    t = column.type
    if _is_temporal(t):
        return list(column.cast(pa.int32() if pa.types.is_date32(t) else pa.int64()).to_pylist())
    if _is_binary(t):
        return [v.hex() for v in column.to_pylist()]
    if pa.types.is_decimal(t):
        return [str(v) for v in column.to_pylist()]
    return list(column.to_pylist())


def from_json(value: Any, type_: pa.DataType) -> Any:
    """A JSON key value back as a comparable Python value (see the module doc)."""
    if _is_binary(type_):
        return bytes.fromhex(value)
    if pa.types.is_decimal(type_):
        return Decimal(value)
    return value


def key_at(table: pa.Table, key_columns: Sequence[str], row: int) -> list[Any]:
    """The JSON form of the key in one row of ``table``."""
    return [column_to_json(table.column(c).slice(row, 1))[0] for c in key_columns]


WHOLE_COLUMN_ROWS = 1024
"""Up to this many rows ``keys_at`` converts whole key columns at once: a small
commit's file converts in a few microseconds a column, where a slice and conversion
per key and column cost about ten, and a ``take`` of the rows asked for forty."""


def keys_at(table: pa.Table, key_columns: Sequence[str], rows: Sequence[int]) -> list[list[Any]]:
    """``key_at`` of several rows. A small commit's files ask for a first and last key
    each and up to 16 span ends: a small table's key columns are converted once."""
    if table.num_rows > WHOLE_COLUMN_ROWS:
        return [key_at(table, key_columns, r) for r in rows]
    columns = [column_to_json(table.column(c)) for c in key_columns]
    return [[column[r] for column in columns] for r in rows]


def key_from_json(values: Sequence[Any], key_schema: pa.Schema) -> KeyTuple:
    return tuple(from_json(v, f.type) for v, f in zip(values, key_schema, strict=True))


def to_arrow(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """JSON key values of one column back as an Arrow array of the column's type."""
    if _is_temporal(type_):
        physical = pa.int32() if pa.types.is_date32(type_) else pa.int64()
        return pa.array(values, physical).cast(type_)
    return pa.array([from_json(v, type_) for v in values], type_)


def partition_texts(columns: pa.Table) -> list[list[str]]:
    """The text form of every row of the partition columns (one list per row)."""
    texts = []
    for column in columns.columns:
        if _is_binary(column.type):
            texts.append([v.hex() for v in column.to_pylist()])
        else:
            texts.append(column.cast(pa.string()).to_pylist())
    return [list(row) for row in zip(*texts, strict=True)] if texts else [[]] * columns.num_rows


def path_text(text: str) -> str:
    """``text`` escaped for one path component."""
    return quote(text, safe="")


def partition_path(columns: Sequence[str], texts: Sequence[str]) -> str:
    """The Hive-style path of one partition; ``""`` for an unpartitioned table."""
    return "/".join(
        f"{path_text(col)}={path_text(text)}" for col, text in zip(columns, texts, strict=True)
    )


def partition_problem(columns: Sequence[str], texts: Sequence[str | None]) -> str | None:
    """Why one partition's values cannot be stored (see the module doc); None if they can."""
    for column, text in zip(columns, texts, strict=True):
        if text is None:
            return f"partition column {column!r} has a null value"
        if "\x00" in text:
            return f"partition column {column!r} has a value with a NUL character"
        size = len(text.encode())
        if size > MAX_PARTITION_VALUE_BYTES:
            return (
                f"partition column {column!r} has a value of {size} bytes; "
                f"at most {MAX_PARTITION_VALUE_BYTES} bytes (UTF-8) are allowed: {text[:40]!r}..."
            )
        component = f"{path_text(column)}={path_text(text)}"
        if len(component) > MAX_PATH_COMPONENT_BYTES:
            return (
                f"partition column {column!r} has a value whose path component is "
                f"{len(component)} bytes once percent-escaped; at most "
                f"{MAX_PATH_COMPONENT_BYTES} are allowed: {text[:40]!r}..."
            )
    path = partition_path(columns, [t or "" for t in texts])
    if len(path) > MAX_PARTITION_PATH_BYTES:
        return (
            f"the partition path {path[:60]!r}... is {len(path)} bytes once percent-escaped; "
            f"at most {MAX_PARTITION_PATH_BYTES} are allowed"
        )
    return None
