"""Spark's pushed filters in Firn's filter form (``firn.model.filters``).

Spark hands a Python data source the conjuncts of a query's ``WHERE`` that it can
express (``pyspark.sql.datasource``: ``EqualTo``, ``In``, ``IsNull``, ``Not``,
``StringStartsWith``, ...; an ``OR`` is never pushed). Each is converted on its own:

- comparisons, ``IN``, ``IS [NOT] NULL`` and ``NOT`` become ``Compare``, ``In``,
  ``IsNull`` and ``Not``, which Firn prunes with (partitions, hash nodes of whole
  keys, Parquet row groups);
- ``StringStartsWith``/``EndsWith``/``Contains`` on a string column become an
  opaque Arrow expression (``ArrowFilter``): it filters rows and prunes partitions,
  nothing more;
- anything else (a nested column, an ``IN`` list holding NULL, a literal that does
  not fit its column) stays with Spark, which applies it after the scan.

A filter counts as pushed only when the scan answers it exactly: Spark does not
apply a pushed filter again. The merged view does (``Table.scan`` filters every
row it returns). A change read (``Table.changes``) applies a condition on non-key
columns to upserts only (a delete row carries no values), so there such filters
are used for pruning and also handed back to Spark (``exact_for_changes``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import datasource as sds

from firn.errors import ConfigError
from firn.model.filters import ArrowFilter, Compare, Filter, In, IsNull, Not, bind, columns

_COMPARISONS: dict[type, str] = {
    sds.EqualTo: "=",
    sds.GreaterThan: ">",
    sds.GreaterThanOrEqual: ">=",
    sds.LessThan: "<",
    sds.LessThanOrEqual: "<=",
}
_STRING_TESTS: dict[type, Callable[..., pc.Expression]] = {
    sds.StringStartsWith: pc.starts_with,
    sds.StringEndsWith: pc.ends_with,
    sds.StringContains: pc.match_substring,
}


class Unsupported(Exception):
    """This Spark filter has no exact Firn form; Spark keeps it."""


def _column(attribute: tuple[str, ...]) -> str:
    if len(attribute) != 1:
        raise Unsupported(f"nested column {'.'.join(attribute)}")
    return attribute[0]


def _convert(f: sds.Filter, schema: pa.Schema) -> Filter:
    kind = type(f)
    if kind in _COMPARISONS:
        if f.value is None:  # type: ignore[attr-defined]
            raise Unsupported("a comparison with NULL")
        return Compare(_column(f.attribute), _COMPARISONS[kind], f.value)  # type: ignore[attr-defined]
    if isinstance(f, sds.EqualNullSafe):
        column = _column(f.attribute)
        # `a <=> v` is `a = v` for a value (false, not null, on a null row: the
        # same rows pass) and `a IS NULL` for NULL.
        return IsNull(column) if f.value is None else Compare(column, "=", f.value)
    if isinstance(f, sds.In):
        values = tuple(f.value)
        if any(v is None for v in values):
            # `a IN (1, NULL)` is null, not false, where a != 1: under a NOT that
            # differs from dropping the NULL. Rare enough to leave to Spark.
            raise Unsupported("an IN list holding NULL")
        return In(_column(f.attribute), values)
    if isinstance(f, sds.IsNull):
        return IsNull(_column(f.attribute))
    if isinstance(f, sds.IsNotNull):
        return IsNull(_column(f.attribute), negated=True)
    if isinstance(f, sds.Not):
        return Not(_convert(f.child, schema))
    if kind in _STRING_TESTS:
        column = _column(f.attribute)  # type: ignore[attr-defined]
        index = schema.get_field_index(column)
        if index < 0 or not pa.types.is_string(schema.field(index).type):
            raise Unsupported(f"a string test on {column!r}, which is not a string column")
        test = _STRING_TESTS[kind](pc.field(column), f.value)  # type: ignore[attr-defined]
        return ArrowFilter(test)
    raise Unsupported(type(f).__name__)


def convert(f: sds.Filter, schema: pa.Schema) -> Filter | None:
    """``f`` in Firn's form, bound to ``schema``; None when Spark must keep it."""
    try:
        return bind(_convert(f, schema), schema)
    except (Unsupported, ConfigError):
        # An unknown column never gets here (Spark resolves names first); a literal
        # Firn cannot type exactly is left to Spark rather than guessed.
        return None


def push(
    filters: list[sds.Filter], schema: pa.Schema, *, exact_for: Callable[[Filter], bool]
) -> tuple[list[Filter], list[sds.Filter]]:
    """Split Spark's filters into (Firn filters to scan with, Spark filters Spark
    must still apply). ``exact_for`` says whether the scan answers a converted
    filter exactly; when not, it is both scanned with and handed back."""
    pushed: list[Filter] = []
    kept: list[sds.Filter] = []
    for f in filters:
        converted = convert(f, schema)
        if converted is None:
            kept.append(f)
            continue
        pushed.append(converted)
        if not exact_for(converted):
            kept.append(f)
    return pushed, kept


_FROM_JVM: dict[str, type] = {
    "EqualTo": sds.EqualTo,
    "EqualNullSafe": sds.EqualNullSafe,
    "GreaterThan": sds.GreaterThan,
    "GreaterThanOrEqual": sds.GreaterThanOrEqual,
    "LessThan": sds.LessThan,
    "LessThanOrEqual": sds.LessThanOrEqual,
    "StringStartsWith": sds.StringStartsWith,
    "StringEndsWith": sds.StringEndsWith,
    "StringContains": sds.StringContains,
}


def from_jvm(data: Mapping[str, Any]) -> sds.Filter:
    """One of Spark's filters as the JVM merge reader hands it over (``org.firn.spark.
    PushedFilters``: ``{"filter": class name, "column": [names], "value": v}``, ``"values"``
    for ``In``, ``"child"`` for ``Not``; a date as ``{"date": "YYYY-MM-DD"}``, a binary
    as ``{"binary": base64}``, a decimal as ``{"decimal": "12.50"}``), as the Python data
    source API would give it.
    ``Unsupported`` for anything else."""
    kind = data.get("filter")
    if kind == "Not":
        return sds.Not(from_jvm(data["child"]))
    attribute = tuple(data.get("column") or ())
    if kind == "IsNull":
        return sds.IsNull(attribute)
    if kind == "IsNotNull":
        return sds.IsNotNull(attribute)
    if kind == "In":
        return sds.In(attribute, tuple(_value(v) for v in data["values"]))
    if kind in _FROM_JVM:
        made: sds.Filter = _FROM_JVM[kind](attribute, _value(data["value"]))
        return made
    raise Unsupported(f"the JVM's filter {kind!r}")


def _value(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"date"}:
            return dt.date.fromisoformat(value["date"])
        if set(value) == {"binary"}:
            try:
                return base64.b64decode(value["binary"], validate=True)
            except binascii.Error as exc:
                raise Unsupported(f"a literal {value!r}") from exc
        if set(value) == {"decimal"}:
            try:
                number = Decimal(value["decimal"])
            except (InvalidOperation, TypeError) as exc:
                raise Unsupported(f"a literal {value!r}") from exc
            if not number.is_finite():
                raise Unsupported(f"a literal {value!r}")
            return number
        raise Unsupported(f"a literal {value!r}")
    return value


def exact_for_changes(key: frozenset[str]) -> Callable[[Filter], bool]:
    """For a change read: only filters on key columns hold for delete rows too."""

    def exact(f: Filter) -> bool:
        return columns(f) <= key

    return exact


def always(_: Any) -> bool:
    """For the merged view: every pushed filter is answered exactly."""
    return True
