"""Naming partitions in arguments: ``"region=eu"`` or ``{"region": "eu"}``.

A partition's key is its Hive-style path (``Table.files()`` and ``Table.status()``
show it): ``col=text`` per partition column, in the table's order, each part
percent-escaped (``firn.model.values.partition_path``). A caller may name one by
that key or by a mapping of every partition column to a value; a value is turned
into text the way the rows' values are (so a ``datetime.date`` and the text
``"2024-01-31"`` name the same partition). Anything else is a ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from firn.errors import ConfigError
from firn.model.schema import TableSchema
from firn.model.values import partition_path, partition_problem, partition_texts

PartitionName = str | Mapping[str, Any]


def partition_key(table: TableSchema, name: PartitionName) -> tuple[str, dict[str, str]]:
    """The key and the column -> text values of the partition ``name`` names."""
    columns = list(table.partition_by)
    if not columns:
        raise ConfigError(f"table {table.name!r} is not partitioned; name no partition")
    if isinstance(name, str):
        texts = _parse(table, name)
    elif isinstance(name, Mapping):
        unknown = [str(c) for c in name if c not in columns]
        missing = [c for c in columns if c not in name]
        if unknown or missing:
            problems = [f"{c!r} is not a partition column" for c in unknown]
            problems += [f"{c!r} is missing" for c in missing]
            raise ConfigError(
                f"a partition of {table.name!r} is named by every partition column "
                f"{columns}: {', '.join(problems)}"
            )
        texts = _texts(table, name)
    else:
        raise ConfigError(
            f"name a partition as 'col=value' or a mapping, got {type(name).__name__}"
        )
    problem = partition_problem(columns, texts)
    if problem is not None:
        raise ConfigError(problem)
    return partition_path(columns, texts), dict(zip(columns, texts, strict=True))


def partition_keys(table: TableSchema, names: Iterable[PartitionName]) -> dict[str, dict[str, str]]:
    """Every named partition: key -> column values (duplicates collapse)."""
    if isinstance(names, (str, Mapping)):
        names = [names]
    return dict(partition_key(table, n) for n in names)


def _parse(table: TableSchema, name: str) -> list[str]:
    columns = list(table.partition_by)
    parts = name.split("/")
    pairs = [p.split("=", 1) for p in parts]
    found = [unquote(p[0]) for p in pairs]
    if found != columns or any(len(p) != 2 for p in pairs):
        raise ConfigError(
            f"partition {name!r} of {table.name!r} must be written "
            f"{'/'.join(f'{c}=...' for c in columns)}"
        )
    texts = [unquote(p[1]) for p in pairs]
    if partition_path(columns, texts) != name:
        raise ConfigError(
            f"partition {name!r} is not in its canonical form "
            f"{partition_path(columns, texts)!r} (values are percent-escaped)"
        )
    return texts


def _texts(table: TableSchema, name: Mapping[str, Any]) -> list[str]:
    texts = []
    for column in table.partition_by:
        field = table.schema.field(column)
        value = name[column]
        try:
            typed = pa.array([value], field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            if isinstance(value, str):
                try:
                    typed = pa.array([value], pa.string()).cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as inner:
                    raise ConfigError(
                        f"{value!r} is not a {field.type} value of partition column {column!r}"
                    ) from inner
            else:
                raise ConfigError(
                    f"{value!r} is not a {field.type} value of partition column {column!r}"
                ) from exc
        texts.append(partition_texts(pa.table({column: typed}))[0][0])
    return texts
