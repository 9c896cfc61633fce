"""``firn.connect`` and the ``Catalog``: create, find and list tables.

A Catalog owns one Postgres connection (schema pinned through ``search_path``) and
the warehouse root where table data lives. Opening one applies any missing
migrations, so a fresh database needs nothing done by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from pydantic import SecretStr

from firn.errors import ConfigError
from firn.postgres import apply_migrations
from firn.postgres import connect as pg_connect
from firn.postgres.connection import Connection
from firn.settings import FirnSettings
from firn.table.properties import TableProperties
from firn.table.schema import TableSchema


@dataclass(frozen=True)
class TableInfo:
    """A table as the catalog records it."""

    table_id: int
    definition: TableSchema
    properties: TableProperties


class Catalog:
    """The entry point of the Python API (SPEC 10)."""

    def __init__(self, settings: FirnSettings, conn: Connection) -> None:
        self.settings = settings
        self.conn = conn

    @property
    def warehouse(self) -> str:
        return self.settings.warehouse

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        primary_key: list[str] | tuple[str, ...],
        partition_by: list[str] | tuple[str, ...] = (),
        properties: dict[str, Any] | None = None,
    ) -> TableInfo:
        """Register a new table; nothing is written when any argument is invalid."""
        definition = TableSchema.build(name, schema, primary_key, partition_by)
        props = TableProperties.parse(properties)
        try:
            with self.conn.transaction():
                row = self.conn.execute(
                    "INSERT INTO catalog_table (name, schema_ipc, primary_key, partition_by, "
                    "properties) VALUES (%s, %s, %s, %s, %s) RETURNING table_id",
                    (
                        name,
                        definition.to_ipc(),
                        list(definition.primary_key),
                        list(definition.partition_by),
                        json.dumps(props.as_dict()),
                    ),
                ).fetchone()
        except psycopg.errors.UniqueViolation as exc:
            raise ConfigError(f"a table named {name!r} already exists") from exc
        assert row is not None
        return TableInfo(row[0], definition, props)

    def table_info(self, name: str) -> TableInfo:
        row = self.conn.execute(
            "SELECT table_id, schema_ipc, primary_key, partition_by, properties "
            "FROM catalog_table WHERE name = %s",
            (name,),
        ).fetchone()
        self.conn.rollback()  # end the read transaction: no snapshot held open
        if row is None:
            raise ConfigError(f"no table named {name!r}")
        table_id, ipc, key, parts, props = row
        definition = TableSchema(name, TableSchema.schema_from_ipc(ipc), tuple(key), tuple(parts))
        return TableInfo(table_id, definition, TableProperties.parse(props))

    def tables(self) -> list[str]:
        rows = self.conn.execute("SELECT name FROM catalog_table ORDER BY name").fetchall()
        self.conn.rollback()
        return [r[0] for r in rows]


def connect(
    database_url: str | None = None,
    warehouse: str | None = None,
    *,
    settings: FirnSettings | None = None,
) -> Catalog:
    """Open the catalog; unset arguments come from FIRN_DATABASE_URL and FIRN_WAREHOUSE."""
    settings = settings or FirnSettings()
    updates: dict[str, Any] = {}
    if database_url is not None:
        updates["database_url"] = SecretStr(database_url)
    if warehouse is not None:
        updates["warehouse"] = warehouse
    settings = settings.model_copy(update=updates)
    conn = pg_connect(settings)
    apply_migrations(conn)
    return Catalog(settings, conn)
