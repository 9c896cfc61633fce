"""``firn.connect`` and the ``Catalog``: create, find and list tables.

A Catalog owns one Postgres connection (schema pinned through ``search_path``,
autocommit, with explicit transactions for every write), opened again when it is
found broken (a database restart), and the warehouse root under which new tables get
their location. Opening one applies any missing migrations, so a
fresh database needs nothing done by hand. A Catalog and its Tables are not
thread-safe; open one per thread or process.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import psycopg
import pyarrow as pa
from pydantic import SecretStr

from firn.api.table import Table
from firn.catalog.grants import Grant, grant_commit, revoke_commit
from firn.catalog.table_catalog import PostgresTableCatalog
from firn.catalog.tables import TableRow, insert_table, table_named, table_names, table_with_id
from firn.errors import ConfigError
from firn.io.storage import warehouse_root
from firn.kafka.publisher import EventPublisher
from firn.kafka.topics import Topics
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.postgres import apply_migrations
from firn.postgres import connect as pg_connect
from firn.postgres.connection import Connection, ReconnectingConnection, access_denied
from firn.postgres.urls import url_as
from firn.settings import FirnSettings

log = logging.getLogger(__name__)


class Catalog:
    """The entry point of the Python API (design §10)."""

    def __init__(
        self, settings: FirnSettings, conn: Connection, commit_publisher: EventPublisher | None
    ) -> None:
        self.settings = settings
        self.tables_catalog = PostgresTableCatalog(
            settings, ReconnectingConnection(settings, conn=conn), commit_publisher
        )
        """What this catalog's Tables talk to (``firn.model.table_catalog``)."""

    @property
    def conn(self) -> Connection:
        """The catalog connection; a broken one is replaced here. Work cut off by the
        break failed with a transient error: callers retry it, not part of it."""
        return self.tables_catalog.conn

    @property
    def db(self) -> ReconnectingConnection:
        """The reconnecting connection itself, for services that hand it on."""
        return self.tables_catalog.db

    @property
    def warehouse(self) -> str:
        return warehouse_root(self.settings.warehouse)

    def close(self) -> None:
        self.tables_catalog.close()

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
    ) -> Table:
        """Register a new table; nothing is written when any argument is invalid.

        Its properties are ``properties`` over the settings' ``table_defaults``. Its
        files go under ``<warehouse>/<name>-<id>``, fixed now: later changes of
        ``FIRN_WAREHOUSE`` do not move existing tables."""
        definition = TableSchema.build(name, schema, primary_key, partition_by)
        defaults = table_defaults(self.settings)
        props = TableProperties.parse(
            {**defaults, **properties} if isinstance(properties, dict) else properties or defaults
        )
        try:
            row = insert_table(self.conn, definition, props, self.warehouse)
        except psycopg.Error as exc:
            denied = access_denied(self.conn, exc, "creating a table")
            if denied is None:
                raise
            raise denied from exc
        log.info("created table %s at %s", name, row.location)
        return self._table(row)

    def table(self, name: str) -> Table:
        """The table called ``name``; ``ConfigError`` if there is none."""
        found = table_named(self.conn, name) if isinstance(name, str) else None
        if found is None:
            raise ConfigError(f"no table named {name!r}")
        return self._table(found)

    def grant(self, table: str, role: str) -> Grant:
        """Let the Postgres role ``role`` commit change sets to ``table`` (and read
        the catalog), nothing else; a missing role is created as a login role with a
        new password. The result's ``database_url`` logs in as it (with the password
        only when the role was created now). Needs the catalog's admin."""
        found = self.table(table)
        granted = grant_commit(self.conn, found.table_id, found.name, role)
        url = url_as(self.settings.database_dsn(), role, granted.password)
        log.info("granted commits to %s to role %s", found.name, role)
        return dataclasses.replace(granted, database_url=url)

    def revoke(self, table: str, role: str) -> bool:
        """Take ``role``'s right to commit to ``table`` away; whether it had it."""
        found = self.table(table)
        revoked = revoke_commit(self.conn, found.table_id, role)
        if revoked:
            log.info("revoked commits to %s from role %s", found.name, role)
        return revoked

    def table_by_id(self, table_id: int) -> Table | None:
        """The table with this id, or None (never created, or dropped). Services find
        tables this way: by the id in the catalog row an event names, never by a
        name an event carries."""
        found = table_with_id(self.conn, table_id)
        return None if found is None else self._table(found)

    def tables(self) -> list[str]:
        return table_names(self.conn)

    def _table(self, row: TableRow) -> Table:
        return Table(
            self.tables_catalog, row.table_id, row.definition, row.properties, row.location
        )


def table_defaults(settings: FirnSettings) -> dict[str, Any]:
    """The settings' ``table_defaults``, checked as a table's properties are."""
    try:
        TableProperties.parse(dict(settings.table_defaults))
    except ConfigError as exc:
        raise ConfigError(f"FIRN_TABLE_DEFAULTS: {exc}") from exc
    return dict(settings.table_defaults)


def connect(
    database_url: str | None = None,
    warehouse: str | None = None,
    *,
    settings: FirnSettings | None = None,
) -> Catalog:
    """Open the catalog; unset arguments come from FIRN_DATABASE_URL and FIRN_WAREHOUSE."""
    settings = settings or FirnSettings()
    table_defaults(settings)  # refused here, before any connection, not at a first table
    updates: dict[str, Any] = {}
    if database_url is not None:
        updates["database_url"] = SecretStr(database_url)
    if warehouse is not None:
        updates["warehouse"] = warehouse
    settings = settings.model_copy(update=updates).with_local_stack()
    conn = pg_connect(settings)
    try:
        apply_migrations(conn)
    except BaseException:
        conn.close()
        raise
    conn.autocommit = True
    publisher = None
    if settings.kafka_bootstrap:
        publisher = EventPublisher(
            settings,
            Topics.from_settings(settings).commits,
            timeout=settings.commit_event_timeout_seconds,
        )
    else:
        log.info(
            "no Kafka configured: commit events are not published; metrics finds "
            "commits at its periodic catalog check"
        )
    return Catalog(settings, conn, publisher)


def postgres_catalog_of(table: Table) -> PostgresTableCatalog:
    """The Postgres catalog behind ``table``, for the work that acts on catalog rows
    directly (compaction, progress); ``ConfigError`` for a table on another catalog."""
    if not isinstance(table.catalog, PostgresTableCatalog):
        raise ConfigError(
            f"table {table.name!r} is not on a Postgres catalog; open it with firn.connect"
        )
    return table.catalog
