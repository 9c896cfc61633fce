"""Table rows: creating, finding and listing tables, and storing their properties.

A table's location is fixed when it is created (``<warehouse>/<name>-<id>``), so a
later change of ``FIRN_WAREHOUSE`` does not move existing tables.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from firn.catalog.schemas import record_first_version
from firn.errors import ConfigError
from firn.io.storage import join_location
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.postgres.connection import Connection


@dataclass(frozen=True)
class TableRow:
    """A table as the catalog records it."""

    table_id: int
    definition: TableSchema
    properties: TableProperties
    location: str


def insert_table(
    conn: Connection, definition: TableSchema, properties: TableProperties, warehouse: str
) -> TableRow:
    """Register a new table under ``warehouse``; ``ConfigError`` if the name is taken."""
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO catalog_table (name, schema_ipc, primary_key, partition_by, "
                "properties, location) VALUES (%s, %s, %s, %s, %s, '') RETURNING table_id",
                (
                    definition.name,
                    definition.to_ipc(),
                    list(definition.primary_key),
                    list(definition.partition_by),
                    json.dumps(properties.as_dict()),
                ),
            ).fetchone()
            assert row is not None
            location = join_location(warehouse, f"{definition.name}-{row[0]}")
            conn.execute(
                "UPDATE catalog_table SET location = %s WHERE table_id = %s", (location, row[0])
            )
            record_first_version(conn, row[0], definition)
    except psycopg.errors.UniqueViolation as exc:
        raise ConfigError(f"a table named {definition.name!r} already exists") from exc
    return TableRow(row[0], definition, properties, location)


def table_named(conn: Connection, name: str) -> TableRow | None:
    """The table called ``name``, or None."""
    if "\x00" in name:
        # Postgres cannot even compare such a name; no table can have it.
        return None
    return _load(conn, "name = %s", name)


def table_with_id(conn: Connection, table_id: int) -> TableRow | None:
    """The table with this id, or None (never created, or dropped)."""
    return _load(conn, "table_id = %s", table_id)


def table_names(conn: Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM catalog_table ORDER BY name").fetchall()]


def table_names_of(conn: Connection, table_ids: Sequence[int]) -> dict[int, str]:
    """The names of the tables ``table_ids`` that exist."""
    rows = conn.execute(
        "SELECT table_id, name FROM catalog_table WHERE table_id = ANY(%s)", (list(table_ids),)
    ).fetchall()
    return {int(tid): str(name) for tid, name in rows}


def properties_of(
    conn: Connection, table_ids: Sequence[int] | None = None
) -> dict[int, tuple[str, TableProperties]]:
    """Name and properties of the tables ``table_ids`` that exist (None: of every
    table), in one statement."""
    rows = conn.execute(
        "SELECT table_id, name, properties FROM catalog_table "
        + ("" if table_ids is None else "WHERE table_id = ANY(%s)"),
        () if table_ids is None else (list(table_ids),),
    ).fetchall()
    return {
        int(tid): (str(name), TableProperties.from_catalog(stored or {}, str(name)))
        for tid, name, stored in rows
    }


def save_properties(conn: Connection, table_id: int, properties: TableProperties) -> bool:
    """Store ``properties``; False when the table no longer exists."""
    with conn.transaction():
        row = conn.execute(
            "UPDATE catalog_table SET properties = %s WHERE table_id = %s RETURNING 1",
            (json.dumps(properties.as_dict()), table_id),
        ).fetchone()
    return row is not None


def _load(conn: Connection, where: str, value: object) -> TableRow | None:
    # The current version and, in the same round trip, every other one: a file of
    # any version is read by field id (firn.model.projection).
    row = conn.execute(
        "SELECT table_id, name, schema_ipc, primary_key, partition_by, properties, location, "
        "schema_id, last_column_id, "
        "(SELECT array_agg(v.schema_id ORDER BY v.schema_id) FROM table_schema v "
        "WHERE v.table_id = c.table_id AND v.schema_id <> c.schema_id), "
        "(SELECT array_agg(v.schema_ipc ORDER BY v.schema_id) FROM table_schema v "
        "WHERE v.table_id = c.table_id AND v.schema_id <> c.schema_id) "
        f"FROM catalog_table c WHERE {where}",
        (value,),
    ).fetchone()
    if row is None:
        return None
    table_id, name, ipc, key, parts, props, location, schema_id, last_id, ids, ipcs = row
    definition = TableSchema(
        name,
        TableSchema.schema_from_ipc(ipc),
        tuple(key),
        tuple(parts),
        schema_id=int(schema_id),
        last_column_id=int(last_id),
    )
    if ids:
        versions = {
            int(i): TableSchema.schema_from_ipc(bytes(b)) for i, b in zip(ids, ipcs, strict=True)
        }
        definition = definition.with_earlier(versions)
    return TableRow(table_id, definition, TableProperties.from_catalog(props, name), location)
