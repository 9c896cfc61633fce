"""Row filters of a scan: Firn's own small form, and how it meets a table's schema.

One filter form serves every reader: ``Table.scan(filter=...)`` takes a
``pyarrow.compute.Expression``, a string (``firn.model.filter_text``: ``"region = 'eu'
and id in (1, 2)"``) or these classes, which the Spark reader builds from Spark's
pushed filters (``EqualTo``, ``In``, ``GreaterThan``, ``IsNull``, ``And``, ``Not``,
...); ``firn.model.filter_text.as_filter`` takes any of the three. Whatever comes in
is *bound* to the table's schema once (``bind``): every
column must exist, and every literal becomes a plain Python value of its column's
type (``'2024-01-01'`` on a date column becomes a ``datetime.date``), so a bound
filter is plain, picklable data.

A bound filter can be:

- turned into a ``pyarrow.compute.Expression`` (``to_expression``), which filters
  rows and lets Parquet row-group statistics skip row groups;
- analysed for pruning (``conjuncts``, ``columns``): which conjuncts mention only
  key columns, and (``firn.engine.pruning``) which whole keys it allows.

A ``pyarrow.compute.Expression`` cannot be taken apart, so it stays opaque
(``ArrowFilter``): it filters rows, skips row groups and prunes partitions (Arrow
simplifies it against each partition's values), but routes no keys to hash nodes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc

from firn.errors import ConfigError

Literal = Union[bool, int, float, str, bytes, Decimal, dt.date, dt.datetime]  # noqa: UP007
"""A literal a filter compares with (a date is also a ``datetime.date``)."""

OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
_ARROW_OPS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


@dataclass(frozen=True)
class Compare:
    """``column op value``; a null column value never matches (SQL)."""

    column: str
    op: str
    """One of ``= != < <= > >=``."""
    value: Literal

    def __str__(self) -> str:
        return f"{_name(self.column)} {self.op} {_show(self.value)}"


@dataclass(frozen=True)
class In:
    """``column IN (values...)``; an empty list matches nothing."""

    column: str
    values: tuple[Literal, ...]

    def __str__(self) -> str:
        return f"{_name(self.column)} IN ({', '.join(_show(v) for v in self.values)})"


@dataclass(frozen=True)
class IsNull:
    """``column IS NULL``, or ``IS NOT NULL`` when ``negated``."""

    column: str
    negated: bool = False

    def __str__(self) -> str:
        return f"{_name(self.column)} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class And:
    parts: tuple[Filter, ...]

    def __str__(self) -> str:
        return " AND ".join(_grouped(p) for p in self.parts)


@dataclass(frozen=True)
class Or:
    parts: tuple[Filter, ...]

    def __str__(self) -> str:
        return " OR ".join(_grouped(p) for p in self.parts)


@dataclass(frozen=True)
class Not:
    part: Filter

    def __str__(self) -> str:
        return f"NOT {_grouped(self.part)}"


@dataclass(frozen=True, eq=False)
class ArrowFilter:
    """An opaque ``pyarrow.compute.Expression`` (see the module doc)."""

    expression: pc.Expression
    referenced: frozenset[str] = field(default_factory=frozenset)
    """The columns it reads, found when it was bound."""

    def __str__(self) -> str:
        return str(self.expression)


Filter = Union[Compare, In, IsNull, And, Or, Not, ArrowFilter]  # noqa: UP007
"""A filter in Firn's form."""


def _name(column: str) -> str:
    plain = column.isidentifier() and column.isascii()
    return column if plain else '"' + column.replace('"', '""') + '"'


def _show(value: Literal) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat()}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return str(value)


def _grouped(part: Filter) -> str:
    return f"({part})" if isinstance(part, And | Or) else str(part)


# -- binding -------------------------------------------------------------------


def bind(f: Filter, schema: pa.Schema) -> Filter:
    """``f`` with its columns checked against ``schema`` and its literals converted
    to their columns' types."""
    if isinstance(f, Compare):
        if f.op not in OPERATORS:
            raise ConfigError(f"unknown comparison {f.op!r}; use one of {' '.join(OPERATORS)}")
        return Compare(f.column, f.op, _literal(schema, f.column, f.value))
    if isinstance(f, In):
        values = tuple(_literal(schema, f.column, v) for v in f.values)
        return In(f.column, values)
    if isinstance(f, IsNull):
        _field(schema, f.column)
        return f
    if isinstance(f, And | Or):
        if not f.parts:
            raise ConfigError(f"{type(f).__name__} needs at least one part")
        return type(f)(tuple(bind(p, schema) for p in f.parts))
    if isinstance(f, Not):
        return Not(bind(f.part, schema))
    if isinstance(f, ArrowFilter):
        return ArrowFilter(f.expression, _referenced(f.expression, schema))
    raise ConfigError(f"not a filter: {f!r}")


def _field(schema: pa.Schema, column: str) -> pa.Field:
    index = schema.get_field_index(column) if isinstance(column, str) else -1
    if index < 0:
        raise ConfigError(
            f"the filter names an unknown column {column!r}; the table has {schema.names}"
        )
    return schema.field(index)


_FAMILIES: list[tuple[Any, tuple[type, ...]]] = [
    (pa.types.is_boolean, (bool,)),
    (pa.types.is_integer, (int,)),
    (pa.types.is_floating, (int, float, Decimal)),
    (pa.types.is_decimal, (int, float, Decimal, str)),
    (pa.types.is_string, (str,)),
    (pa.types.is_large_string, (str,)),
    (pa.types.is_binary, (bytes, str)),
    (pa.types.is_large_binary, (bytes, str)),
    (pa.types.is_date, (dt.date, str)),
    (pa.types.is_timestamp, (dt.datetime, dt.date, str)),
]
"""Which Python literals may stand for a value of each column type; strings are
parsed by Arrow (dates, timestamps, decimals), never numbers as strings or back."""


def _literal(schema: pa.Schema, column: str, value: object) -> Literal:
    target = _field(schema, column).type
    allowed = next((kinds for test, kinds in _FAMILIES if test(target)), ())
    fits = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
    if value is None:
        raise ConfigError(f"compare {column!r} with NULL using IS NULL / IS NOT NULL")
    if not fits:
        raise ConfigError(
            f"column {column!r} is {target}; it cannot be compared with {value!r} "
            f"({type(value).__name__})"
        )
    try:
        if isinstance(value, str) and pa.types.is_binary(target):
            value = value.encode()
        scalar = pa.scalar(value).cast(target)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"column {column!r} is {target}; {value!r} is not a value of it ({reason})"
        ) from exc
    converted: Literal = scalar.as_py()
    return converted


def _referenced(expression: pc.Expression, schema: pa.Schema) -> frozenset[str]:
    """The columns an opaque expression reads: it binds to ``schema`` (else
    ``ConfigError``), and stops binding when a column it reads is left out."""
    empty = schema.empty_table()
    try:
        empty.filter(expression)
    except (pa.ArrowException, TypeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"the filter {expression} does not fit the table: {reason}") from exc
    used = set()
    for name in schema.names:
        try:
            empty.drop_columns([name]).filter(expression)
        except (pa.ArrowException, TypeError):
            used.add(name)
    return frozenset(used)


# -- using a bound filter --------------------------------------------------------


def to_expression(f: Filter, schema: pa.Schema) -> pc.Expression:
    """The Arrow expression of a bound filter (literals typed as their columns)."""
    if isinstance(f, Compare):
        value = pa.scalar(f.value, _field(schema, f.column).type)
        compare: pc.Expression = _ARROW_OPS[f.op](pc.field(f.column), value)
        return compare
    if isinstance(f, In):
        values = pa.array(list(f.values), _field(schema, f.column).type)
        return pc.field(f.column).isin(values)
    if isinstance(f, IsNull):
        test = pc.field(f.column).is_null()
        return ~test if f.negated else test
    if isinstance(f, And):
        return _fold(pc.Expression.__and__, [to_expression(p, schema) for p in f.parts])
    if isinstance(f, Or):
        return _fold(pc.Expression.__or__, [to_expression(p, schema) for p in f.parts])
    if isinstance(f, Not):
        return ~to_expression(f.part, schema)
    return f.expression


def _fold(op: Any, parts: Sequence[pc.Expression]) -> pc.Expression:
    out = parts[0]
    for part in parts[1:]:
        out = op(out, part)
    return out


def columns(f: Filter) -> frozenset[str]:
    """Every column a bound filter reads."""
    if isinstance(f, Compare | In | IsNull):
        return frozenset([f.column])
    if isinstance(f, And | Or):
        return frozenset().union(*(columns(p) for p in f.parts))
    if isinstance(f, Not):
        return columns(f.part)
    return f.referenced


def conjuncts(f: Filter | None) -> list[Filter]:
    """The parts of a top-level AND (nested ANDs flattened); ``[f]`` otherwise."""
    if f is None:
        return []
    if isinstance(f, And):
        return [c for p in f.parts for c in conjuncts(p)]
    return [f]


def conjunction(parts: Iterable[Filter]) -> Filter | None:
    """The AND of ``parts``: ``None`` for none, the part itself for one."""
    listed = tuple(parts)
    if not listed:
        return None
    return listed[0] if len(listed) == 1 else And(listed)
