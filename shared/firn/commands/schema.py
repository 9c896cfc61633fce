"""``firn schema TABLE`` and ``firn alter TABLE OPERATION...``: a table's schema
versions from the command line (``Table.schemas()``, ``Table.update_schema()``).

``firn schema`` shows the current columns (position, field id, name, type, required
or optional, default, doc, key and partition markers) and every version: the
snapshot it began at, when, and what it changed.

``firn alter`` applies its operations in the order given on the command line, each
to the result of the ones before, as ONE ``update_schema()`` block: one new version,
or, when any operation (or the result) is refused, nothing at all::

    firn alter shop.orders --add 'discount:decimal(12,2)=0' --doc 'discount:in EUR' \\
        --rename note:comment --widen qty:int64 --after discount:amount

    --add NAME:TYPE[=DEFAULT]          a nullable column, last; rows written before it
                                       read as DEFAULT (null without one)
    --add-required NAME:TYPE=DEFAULT   a required column, last (needs a DEFAULT)
    --drop NAME                        drop a column (not a key or partition column)
    --rename OLD:NEW                   the same column under a new name
    --widen NAME:TYPE                  a lossless widening (int32 -> int64, ...)
    --optional NAME                    a required column becomes optional
    --doc NAME:TEXT                    set a column's doc
    --first NAME                       move a column first
    --after NAME:OTHER                 move NAME right after OTHER
    --before NAME:OTHER                move NAME right before OTHER

A column name runs to the first ``:``. TYPE is one of int8, int16, int32, int64,
uint8 .. uint64, float32 (float), float64 (double), bool, string, large_string,
binary, large_binary, date32, date64, timestamp[UNIT] and timestamp[UNIT, tz=ZONE]
(UNIT s, ms, us or ns; ZONE an IANA name or +HH:MM) and decimal(P,S) (also spelled
decimal128(P, S)): the spellings ``firn schema`` prints are accepted too. A DEFAULT
runs from the first ``=`` outside the type's brackets to the end: an integer, a
number, true/false, text (as is; ``NAME:string=`` is the empty string), an ISO date,
an ISO date and time (on a column with a zone, a time without an offset is in the
column's zone), a decimal, or hex digits for binary. (Quote what the shell would
split or read: ``'d:decimal(12,2)=0'``, ``'ts:timestamp[us, tz=UTC]'``.)

Everything is parsed before the catalog is opened, so bad input costs no connection.
``--dry-run`` checks the operations against the table as it is and prints the
columns they would make, committing nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
import zoneinfo
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import pyarrow as pa

from firn.api.catalog import connect
from firn.catalog.history import SchemaColumn, describe_columns
from firn.commands.output import Grid, Output, grid
from firn.errors import ConfigError
from firn.model.evolution import SchemaChange
from firn.model.schema import TableSchema
from firn.settings import FirnSettings

TYPE_NAMES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date32[day]": pa.date32(),
    "date64": pa.date64(),
    "date64[ms]": pa.date64(),
}
"""The plain type names ``--add`` and ``--widen`` take (and pyarrow's spellings of them)."""

TYPE_HELP = (
    "int8..int64, uint8..uint64, float32, float64, bool, string, large_string, binary, "
    "large_binary, date32, date64, timestamp[us], timestamp[us, tz=UTC], decimal(12,2)"
)

# Matched whole (fullmatch), on the lower-cased text but for the zone.
_DECIMAL = re.compile(r"decimal(?:128)?\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)", re.IGNORECASE)
_TIMESTAMP = re.compile(r"timestamp\[\s*(\w+)\s*(?:,\s*(?:tz\s*=\s*)?(.*?))?\s*\]", re.IGNORECASE)
_UNITS = ("s", "ms", "us", "ns")
_FIXED_OFFSET = re.compile(r"[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]")
_INTEGER = re.compile(r"[+-]?\d+")
_HEX = re.compile(r"(?:[0-9A-Fa-f]{2})*")


@dataclass(frozen=True)
class Kind:
    """One kind of ``firn alter`` operation."""

    option: str
    metavar: str
    help: str


KINDS = (
    Kind(
        "--add",
        "NAME:TYPE[=DEFAULT]",
        "add a nullable column, last; rows written before it read as DEFAULT (null without one)",
    ),
    Kind(
        "--add-required",
        "NAME:TYPE=DEFAULT",
        "add a required column, last; rows written before it read as DEFAULT",
    ),
    Kind("--drop", "NAME", "drop a column (not a key or partition column)"),
    Kind("--rename", "OLD:NEW", "rename a column (same field id and values)"),
    Kind("--widen", "NAME:TYPE", "widen a column's type losslessly (int32 -> int64, ...)"),
    Kind("--optional", "NAME", "make a required column optional"),
    Kind("--doc", "NAME:TEXT", "set a column's doc"),
    Kind("--first", "NAME", "move a column first"),
    Kind("--after", "NAME:OTHER", "move column NAME right after OTHER"),
    Kind("--before", "NAME:OTHER", "move column NAME right before OTHER"),
)


class _InOrder(argparse.Action):
    """Appends ``(option, value)`` to the one list every operation shares, so the
    operations keep the order they were given in."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        listed = list(getattr(namespace, self.dest, None) or [])
        listed.append((self.option_strings[0], values))
        setattr(namespace, self.dest, listed)


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    schema = commands.add_parser(
        "schema",
        parents=[common],
        help="a table's columns and the history of its schema versions",
    )
    schema.add_argument("table")
    schema.set_defaults(run=show_schema)

    alter = commands.add_parser(
        "alter",
        parents=[common],
        help="change a table's schema: the operations, in the order given, as one version",
        description="Apply the operations in the order given, each to the result of the "
        "ones before, as one new schema version; when any is refused, nothing changes. "
        f"TYPE: {TYPE_HELP}. DEFAULT: a value of the type (ISO dates and times, true/false, "
        "hex for binary).",
    )
    alter.add_argument("table")
    operations = alter.add_argument_group("operations (repeatable, applied in order)")
    for kind in KINDS:
        operations.add_argument(
            kind.option, dest="operations", action=_InOrder, metavar=kind.metavar, help=kind.help
        )
    alter.add_argument(
        "--dry-run",
        action="store_true",
        help="check the operations and print the columns they would make; commit nothing",
    )
    alter.set_defaults(run=run_alter, operations=None)


# -- parsing ------------------------------------------------------------------------


def parse_type(text: str) -> pa.DataType:
    """A column type from its text form (``int64``, ``decimal(12,2)``,
    ``timestamp[us, tz=UTC]``, ...); ``ConfigError`` when it is not one."""
    spelled = text.strip()
    lowered = spelled.lower()
    if lowered in TYPE_NAMES:
        return TYPE_NAMES[lowered]
    if match := _DECIMAL.fullmatch(spelled):
        precision, scale = int(match[1]), int(match[2])
        if not 1 <= precision <= 38:
            raise ConfigError(
                f"decimal precision must be from 1 to 38, got {precision} in {text!r}"
            )
        if not 0 <= scale <= precision:
            raise ConfigError(
                f"decimal scale must be from 0 to the precision ({precision}), got {scale} "
                f"in {text!r}"
            )
        return pa.decimal128(precision, scale)
    if match := _TIMESTAMP.fullmatch(spelled):
        unit, zone = match[1].lower(), match[2]
        if unit not in _UNITS:
            raise ConfigError(
                f"timestamp unit must be one of {', '.join(_UNITS)}, got {match[1]!r} in {text!r}"
            )
        if zone is not None and not zone:
            raise ConfigError(f"empty time zone in {text!r}: use timestamp[{unit}, tz=UTC]")
        if zone:
            _check_zone(zone)
        return pa.timestamp(unit, tz=zone or None)
    if lowered.startswith("decimal"):
        raise ConfigError(f"bad decimal type {spelled!r}: use decimal(PRECISION,SCALE)")
    if lowered.startswith("timestamp"):
        raise ConfigError(
            f"bad timestamp type {spelled!r}: use timestamp[us] or timestamp[us, tz=UTC]"
        )
    raise ConfigError(f"unknown column type {spelled!r} (types: {TYPE_HELP})")


def _check_zone(zone: str) -> None:
    if _FIXED_OFFSET.fullmatch(zone):
        return
    try:
        zoneinfo.ZoneInfo(zone)
    except (ValueError, KeyError, OSError):
        raise ConfigError(
            f"unknown time zone {zone!r}: use an IANA name such as 'UTC' or 'Europe/Paris', "
            "or a fixed offset such as '+05:30'"
        ) from None


def _zone(zone: str) -> dt.tzinfo:
    if _FIXED_OFFSET.fullmatch(zone):
        sign = 1 if zone[0] == "+" else -1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))
    return zoneinfo.ZoneInfo(zone)


def parse_default(text: str, type_: pa.DataType) -> Any:
    """A default's text as a Python value of a ``type_`` column; ``ConfigError`` when
    it is not one. (Whether it fits, an int8's range say, the schema change checks.)"""
    value = text.strip()
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return text
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        if not _HEX.fullmatch(value):
            raise ConfigError(f"default {value!r} of a binary column must be hex digits, in pairs")
        return bytes.fromhex(value)
    if not value:
        raise ConfigError(f"empty default for a {type_} column")
    if pa.types.is_integer(type_):
        if not _INTEGER.fullmatch(value):
            raise ConfigError(f"default {value!r} is not an integer (column type {type_})")
        return int(value)
    if pa.types.is_floating(type_):
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"default {value!r} is not a number (column type {type_})") from None
        if not math.isfinite(number):
            raise ConfigError(f"default {value!r} must be a finite number")
        return number
    if pa.types.is_boolean(type_):
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"default {value!r} of a bool column must be true or false")
        return value.lower() == "true"
    if pa.types.is_decimal(type_):
        try:
            exact = Decimal(value)
        except InvalidOperation:
            raise ConfigError(f"default {value!r} is not a decimal number") from None
        if not exact.is_finite():
            raise ConfigError(f"default {value!r} must be a finite decimal number")
        return exact
    if pa.types.is_date(type_):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            raise ConfigError(f"default {value!r} is not an ISO date (YYYY-MM-DD)") from None
    if pa.types.is_timestamp(type_):
        return _timestamp_default(value, type_)
    raise ConfigError(f"a default for a {type_} column cannot be given here")


def _timestamp_default(value: str, type_: pa.TimestampType) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(
            f"default {value!r} is not an ISO date and time (YYYY-MM-DDTHH:MM:SS[+HH:MM])"
        ) from None
    if type_.tz is None and moment.tzinfo is not None:
        raise ConfigError(
            f"default {value!r} has an offset, but the column has no time zone: give the "
            "time without one"
        )
    if type_.tz is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=_zone(type_.tz))
    step = {"s": 1_000_000, "ms": 1000}.get(type_.unit, 1)
    if moment.microsecond % step:
        raise ConfigError(f"default {value!r} is finer than the column's unit ({type_.unit})")
    return moment


def _split(text: str, form: str) -> tuple[str, str]:
    """``LEFT:RIGHT`` at the first colon, both sides stripped and non-empty."""
    left, sep, right = text.partition(":")
    if not sep or not left.strip() or not right.strip():
        raise ConfigError(f"expected {form}")
    return left.strip(), right.strip()


def _split_default(text: str) -> tuple[str, str | None]:
    """``TYPE[=DEFAULT]`` at the first ``=`` outside brackets (``tz=`` is inside)."""
    depth = 0
    for i, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "=" and depth == 0:
            return text[:i], text[i + 1 :]
    return text, None


class Alterable(Protocol):
    """What an operation is applied to: ``UpdateSchema`` (commits) or the model's
    ``SchemaChange`` (``--dry-run``); both have these methods."""

    def add_column(
        self,
        name: str,
        field_type: pa.DataType,
        default: Any = None,
        doc: str | None = None,
        *,
        required: bool = False,
    ) -> Any: ...

    def delete_column(self, name: str) -> Any: ...

    def rename_column(self, name: str, new_name: str) -> Any: ...

    def update_column(
        self,
        name: str,
        field_type: pa.DataType | None = None,
        required: bool | None = None,
        doc: str | None = None,
    ) -> Any: ...

    def move_first(self, name: str) -> Any: ...

    def move_after(self, name: str, after: str) -> Any: ...

    def move_before(self, name: str, before: str) -> Any: ...


@dataclass(frozen=True)
class Operation:
    """One parsed ``firn alter`` operation."""

    option: str
    text: str
    apply: Callable[[Alterable], object]

    def __str__(self) -> str:
        return f"{self.option} {self.text}"


def parse_operation(option: str, text: str) -> Operation:
    """An operation from its option and argument; ``ConfigError`` when malformed."""
    if option in ("--add", "--add-required"):
        required = option == "--add-required"
        form = "NAME:TYPE=DEFAULT" if required else "NAME:TYPE[=DEFAULT]"
        name, rest = _split(text, form)
        type_text, default_text = _split_default(rest)
        if not type_text.strip():
            raise ConfigError(f"expected {form}")
        type_ = parse_type(type_text)
        if required and default_text is None:
            raise ConfigError(
                "a required column needs a default, the value rows written before it "
                f"read as: {form}"
            )
        default = None if default_text is None else parse_default(default_text, type_)
        return Operation(
            option,
            text,
            lambda u: u.add_column(name, type_, default, required=required),
        )
    if option in ("--drop", "--optional", "--first"):
        column = text.strip()
        if not column:
            raise ConfigError("expected a column name")
        if option == "--drop":
            return Operation(option, text, lambda u: u.delete_column(column))
        if option == "--optional":
            return Operation(option, text, lambda u: u.update_column(column, required=False))
        return Operation(option, text, lambda u: u.move_first(column))
    if option == "--rename":
        old, new = _split(text, "OLD:NEW")
        return Operation(option, text, lambda u: u.rename_column(old, new))
    if option == "--widen":
        column, type_text = _split(text, "NAME:TYPE")
        wider = parse_type(type_text)
        return Operation(option, text, lambda u: u.update_column(column, field_type=wider))
    if option == "--doc":
        column, sep, doc = text.partition(":")
        if not sep or not column.strip():
            raise ConfigError("expected NAME:TEXT")
        column = column.strip()
        return Operation(option, text, lambda u: u.update_column(column, doc=doc))
    if option in ("--after", "--before"):
        column, other = _split(text, "NAME:OTHER")
        if option == "--after":
            return Operation(option, text, lambda u: u.move_after(column, other))
        return Operation(option, text, lambda u: u.move_before(column, other))
    raise ConfigError(f"unknown schema operation {option}")


def parse_operations(given: Sequence[tuple[str, str]] | None) -> list[Operation]:
    """The command line's operations, in order; ``ConfigError`` when there are none."""
    if not given:
        options = ", ".join(k.option for k in KINDS)
        raise ConfigError(f"firn alter needs at least one operation ({options})")
    parsed = []
    for option, text in given:
        try:
            parsed.append(parse_operation(option, text))
        except ConfigError as exc:
            raise ConfigError(f"{option} {text}: {exc}") from exc
    return parsed


def apply_operations(target: Alterable, operations: Sequence[Operation]) -> None:
    """Each operation on ``target`` in order; a refused one names itself."""
    for operation in operations:
        try:
            operation.apply(target)
        except ConfigError as exc:
            raise ConfigError(f"{operation}: {exc}") from exc


# -- the commands -----------------------------------------------------------------


def column_dict(column: SchemaColumn) -> dict[str, Any]:
    return {
        "id": column.field_id,
        "name": column.name,
        "type": column.type,
        "required": column.required,
        "default": column.default,
        "doc": column.doc,
        "key": column.key,
        "partition": column.partition,
    }


def columns_of(definition: TableSchema) -> tuple[SchemaColumn, ...]:
    return describe_columns(definition.schema, definition.primary_key, definition.partition_by)


def show_schema(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        table = catalog.table(args.table)
        versions = table.schemas()
    current = versions[-1].definition
    columns = columns_of(current)
    history = [
        {
            "schema_id": v.schema_id,
            "snapshot_id": v.snapshot_id,
            "created_at": None if v.created_at is None else v.created_at.isoformat(),
            "changes": list(v.changes),
            "columns": list(v.schema.names),
        }
        for v in versions
    ]
    data = {
        "table": table.name,
        "schema_id": current.schema_id,
        "columns": [column_dict(c) for c in columns],
        "versions": history,
    }
    text: list[str | Grid] = [
        f"table {table.name}: schema version {current.schema_id} "
        f"({len(versions)} version{'s' if len(versions) != 1 else ''})",
        "",
        columns_grid(columns),
        "",
        grid(
            ("VERSION", "SNAPSHOT", "CREATED", "CHANGES"),
            [
                (
                    v.schema_id,
                    v.snapshot_id,
                    _when(v.created_at),
                    "; ".join(v.changes) or ("(as created)" if v.schema_id == 0 else ""),
                )
                for v in versions
            ],
        ),
    ]
    return Output(data, text)


def columns_grid(columns: Sequence[SchemaColumn]) -> Grid:
    return grid(
        ("POS", "ID", "COLUMN", "TYPE", "MODE", "DEFAULT", "KEY", "DOC"),
        [
            (
                i,
                c.field_id,
                c.name,
                c.type,
                "required" if c.required else "optional",
                c.default_text,
                ", ".join(m for m, on in (("key", c.key), ("partition", c.partition)) if on),
                None if c.doc is None else " ".join(c.doc.split()),
            )
            for i, c in enumerate(columns, start=1)
        ],
    )


def _when(at: dt.datetime | None) -> str | None:
    return None if at is None else at.isoformat(sep=" ", timespec="seconds")


def run_alter(args: argparse.Namespace, settings: FirnSettings) -> Output:
    operations = parse_operations(args.operations)
    with connect(settings=settings) as catalog:
        table = catalog.table(args.table)
        if args.dry_run:
            change = SchemaChange(table.refresh().definition)
            apply_operations(change, operations)
            result = change.apply()
            return _dry_run(table.name, change, result)
        with table.update_schema() as update:
            apply_operations(update, operations)
        version = update.committed
        current = table.definition
    if version is None:
        columns = columns_of(current)
        data = {
            "table": table.name,
            "changed": False,
            "schema_id": current.schema_id,
            "columns": [column_dict(c) for c in columns],
        }
        return Output(
            data, f"table {table.name}: nothing changed (schema version {current.schema_id})"
        )
    columns = columns_of(version.definition)
    data = {
        "table": table.name,
        "changed": True,
        "schema_id": version.schema_id,
        "snapshot_id": version.snapshot_id,
        "changes": list(version.changes),
        "columns": [column_dict(c) for c in columns],
    }
    text: list[str | Grid] = [
        f"table {table.name}: schema version {version.schema_id} at snapshot "
        f"{version.snapshot_id}: {'; '.join(version.changes)}",
        "",
        columns_grid(columns),
    ]
    return Output(data, text)


def _dry_run(name: str, change: SchemaChange, result: TableSchema) -> Output:
    changed = result is not change.current
    columns = columns_of(result)
    data = {
        "table": name,
        "dry_run": True,
        "changed": changed,
        "schema_id": result.schema_id,
        "changes": list(change.operations) if changed else [],
        "columns": [column_dict(c) for c in columns],
    }
    if changed:
        head = (
            f"table {name}: would make schema version {result.schema_id} "
            f"(dry run, nothing committed): {'; '.join(change.operations)}"
        )
    else:
        head = f"table {name}: would change nothing (schema version {result.schema_id})"
    return Output(data, [head, "", columns_grid(columns)])
