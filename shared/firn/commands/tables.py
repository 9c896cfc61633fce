"""``firn table create|list|show|set``: tables through the public API (``firn.connect``).

A schema is given as ``NAME:TYPE`` pairs, types in pyarrow's spelling (``int64``,
``string``, ``double``, ``bool``, ``date32``, ``timestamp[us]``,
``timestamp[us, UTC]``, ``decimal128(10, 2)``, ...); key columns are made non-null,
the others nullable. Everything is parsed before the catalog is opened, so bad input
costs no connection and writes nothing.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from firn.api.catalog import connect
from firn.api.table import Table
from firn.commands.output import Grid, Output, grid
from firn.errors import ConfigError
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.readable import size
from firn.settings import FirnSettings

# Matched whole (fullmatch): with ``$`` a trailing newline would pass.
_COLUMN = re.compile(r"\s*([^:\s]+)\s*:\s*(\S.*?)\s*")
_DECIMAL = re.compile(r"decimal(?:128)?\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")
_TIMESTAMP = re.compile(r"timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*(?:tz=)?([^\]]*?))?\s*\]")
_TYPE_EXAMPLES = "int64, string, double, bool, date32, timestamp[us], decimal128(10, 2)"


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    table = commands.add_parser("table", help="create, list, show and tune tables")
    actions = table.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", parents=[common], help="create a table")
    create.add_argument("name")
    create.add_argument(
        "--schema", required=True, help=f"columns as NAME:TYPE,...; types: {_TYPE_EXAMPLES}"
    )
    key = create.add_mutually_exclusive_group(required=True)
    key.add_argument("--primary-key", metavar="COLUMNS", help="comma-separated key columns")
    key.add_argument(
        "--append-only", action="store_true", help="no primary key: inserts only, bin-packed"
    )
    create.add_argument(
        "--partition-by",
        default="",
        metavar="COLUMNS",
        help="identity partition columns (in the key)",
    )
    create.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a table property (design §8 names, e.g. change.buckets=8); repeatable",
    )
    create.set_defaults(run=create_table)

    listing = actions.add_parser("list", parents=[common], help="list the tables")
    listing.set_defaults(run=list_tables)

    show = actions.add_parser("show", parents=[common], help="a table's definition and files")
    show.add_argument("name")
    show.set_defaults(run=show_table)

    tune = actions.add_parser(
        "set",
        parents=[common],
        help="change properties of tables (Table.set_properties), each table on its own",
    )
    tune.add_argument("names", nargs="*", metavar="name", help="the tables to change")
    tune.add_argument("--all", action="store_true", help="every table of the catalog")
    tune.add_argument(
        "--property",
        action="append",
        default=[],
        required=True,
        metavar="KEY=VALUE",
        help="a table property to set (e.g. major.change-bytes-lowest=0); repeatable",
    )
    tune.set_defaults(run=set_properties)


def create_table(args: argparse.Namespace, settings: FirnSettings) -> Output:
    key = [] if args.append_only else names(args.primary_key, "--primary-key")
    schema = parse_schema(args.schema, key)
    partition_by = names(args.partition_by, "--partition-by") if args.partition_by else []
    properties = parse_properties(args.property)
    # The same checks create_table makes, before a connection is opened.
    TableSchema.build(args.name, schema, key, partition_by)
    TableProperties.parse(properties)
    with connect(settings=settings) as catalog:
        info = describe(catalog.create_table(args.name, schema, key, partition_by, properties))
    return Output({"created": True, **info}, f"created table {args.name}\n{_show_text(info)}")


def set_properties(args: argparse.Namespace, settings: FirnSettings) -> Output:
    """Apply ``--property`` to the named tables (or ``--all``), one table at a time: a
    table refused (its name unknown) stops the command, the tables before it keep the
    change, and the output names them."""
    if bool(args.names) == bool(args.all):
        raise ConfigError("name the tables to change, or give --all (not both)")
    updates = parse_properties(args.property)
    TableProperties.parse(updates)  # the checks set_properties makes, before connecting
    changed: list[dict[str, Any]] = []
    with connect(settings=settings) as catalog:
        names = catalog.tables() if args.all else list(dict.fromkeys(args.names))
        for name in names:
            try:
                properties = catalog.table(name).set_properties(updates)
            except ConfigError as exc:
                done = ", ".join(c["name"] for c in changed) or "none"
                raise ConfigError(f"{exc} (changed before it: {done})") from exc
            changed.append({"name": name, "properties": properties.as_dict()})
    pairs = ", ".join(f"{k}={v}" for k, v in updates.items())
    text = f"set {pairs} on {len(changed)} table(s)" + "".join(f"\n  {c['name']}" for c in changed)
    return Output({"set": updates, "tables": changed}, text)


def list_tables(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        infos = [describe(catalog.table(name)) for name in catalog.tables()]
    rows = [
        (
            i["name"],
            ", ".join(i["primary_key"]) or "(append-only)",
            ", ".join(i["partition_by"]),
            i["files"],
            size(i["bytes"]),
            i["snapshot"],
        )
        for i in infos
    ]
    text = grid(("TABLE", "KEY", "PARTITIONED BY", "FILES", "SIZE", "SNAPSHOT"), rows)
    return Output({"tables": infos}, text if infos else "no tables")


def show_table(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        info = describe(catalog.table(args.name))
    return Output(info, _show_text(info))


def describe(table: Table) -> dict[str, Any]:
    """A table's definition, properties and live files, as JSON-ready data."""
    files = table.files()
    stores = {}
    for store in ("base", "change"):
        mine = files.filter(pc.equal(files.column("store"), store))
        stores[store] = {"files": mine.num_rows, "bytes": _total(mine.column("size"))}
    return {
        "name": table.name,
        "table_id": table.table_id,
        "location": table.location,
        "columns": [
            {"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in table.schema
        ],
        "primary_key": list(table.definition.primary_key),
        "partition_by": list(table.definition.partition_by),
        "properties": table.properties.as_dict(),
        "snapshot": table.current_snapshot(),
        "partitions": len(set(files.column("partition").to_pylist())),
        "files": files.num_rows,
        "bytes": _total(files.column("size")),
        "stores": stores,
    }


def _total(column: pa.ChunkedArray) -> int:
    total = pc.sum(column).as_py()
    return int(total or 0)


def _show_text(info: dict[str, Any]) -> list[str | Grid]:
    stores = info["stores"]
    lines: list[str | Grid] = [
        f"table {info['name']} (id {info['table_id']}, snapshot {info['snapshot']})",
        f"  location      {info['location']}",
        f"  primary key   {', '.join(info['primary_key']) or '(none: append-only)'}",
        f"  partitioned   {', '.join(info['partition_by']) or 'no'}"
        f" ({info['partitions']} partition(s) with live files)",
        f"  live files    {info['files']} ({size(info['bytes'])}): "
        f"{stores['base']['files']} base ({size(stores['base']['bytes'])}), "
        f"{stores['change']['files']} change ({size(stores['change']['bytes'])})",
        "",
        grid(
            ("COLUMN", "TYPE", "NULL"),
            [(c["name"], c["type"], "yes" if c["nullable"] else "no") for c in info["columns"]],
        ),
        "",
        grid(("PROPERTY", "VALUE"), sorted(info["properties"].items())),
    ]
    return lines


def names(text: str | None, option: str) -> list[str]:
    """A comma-separated list of column names."""
    listed = [n.strip() for n in (text or "").split(",")]
    if not text or not all(listed):
        raise ConfigError(f"{option} takes comma-separated column names, got {text!r}")
    return listed


def parse_schema(text: str, primary_key: list[str]) -> pa.Schema:
    """``id:int64,v:string`` as an Arrow schema; key columns are non-null."""
    fields = []
    for column in _split_columns(text):
        match = _COLUMN.fullmatch(column)
        if match is None:
            raise ConfigError(f"bad column {column.strip()!r} in --schema: use NAME:TYPE")
        name, type_text = match[1], match[2]
        fields.append(pa.field(name, parse_type(type_text), nullable=name not in primary_key))
    seen = [f.name for f in fields]
    duplicates = sorted({n for n in seen if seen.count(n) > 1})
    if duplicates:
        raise ConfigError(f"--schema names {duplicates} more than once")
    if not fields:
        raise ConfigError("--schema has no columns")
    return pa.schema(fields)


def parse_type(text: str) -> pa.DataType:
    """A pyarrow type from its name, e.g. ``int64`` or ``decimal128(10, 2)``."""
    spelled = text.strip()
    if match := _DECIMAL.fullmatch(spelled.lower()):
        try:
            return pa.decimal128(int(match[1]), int(match[2]))
        except (ValueError, pa.ArrowInvalid) as exc:
            raise ConfigError(f"bad decimal type {spelled!r}: {exc}") from exc
    if match := _TIMESTAMP.fullmatch(spelled):
        return pa.timestamp(match[1], tz=match[2] or None)
    try:
        return pa.type_for_alias(spelled)
    except ValueError:
        raise ConfigError(f"unknown column type {spelled!r} (e.g. {_TYPE_EXAMPLES})") from None


def _split_columns(text: str) -> list[str]:
    """Split on the commas that separate columns, not those inside a type's
    parentheses or brackets (``decimal128(10, 2)``)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()] if text.strip() else []


def parse_properties(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` options as a dict; values stay strings (the table's property
    model parses sizes, durations and numbers)."""
    properties = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"--property takes KEY=VALUE, got {pair!r}")
        properties[key.strip()] = value.strip()
    return properties
