"""``firn.connect`` and the ``Catalog``: create, find and list tables.

A Catalog owns one Postgres connection (schema pinned through ``search_path``,
autocommit, with explicit transactions for every write), opened again when it is
found broken (a database restart), and the warehouse root under which new tables get
their location. Opening one applies any missing migrations, so a
fresh database needs nothing done by hand. A Catalog and its Tables are not
thread-safe; open one per thread or process.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
import pyarrow as pa
from pydantic import SecretStr

from firn.api.table import Table
from firn.errors import ConfigError
from firn.events.publisher import EventPublisher
from firn.io.storage import join_location, resolve_root
from firn.kafka.topics import Topics
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.postgres import apply_migrations
from firn.postgres import connect as pg_connect
from firn.postgres.connection import Connection, ReconnectingConnection
from firn.settings import FirnSettings

log = logging.getLogger(__name__)


class Catalog:
    """The entry point of the Python API (SPEC 10)."""

    def __init__(
        self, settings: FirnSettings, conn: Connection, commit_publisher: EventPublisher | None
    ) -> None:
        self.settings = settings
        self.db = ReconnectingConnection(settings, conn=conn)
        self.commit_publisher = commit_publisher

    @property
    def conn(self) -> Connection:
        """The catalog connection; a broken one is replaced here. Work cut off by the
        break failed with a transient error: callers retry it, not part of it."""
        return self.db.conn

    @property
    def warehouse(self) -> str:
        return resolve_root(self.settings.warehouse)

    def close(self) -> None:
        if self.commit_publisher is not None:
            self.commit_publisher.close()
        self.db.close()

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

        Its files go under ``<warehouse>/<name>-<id>``, fixed now: later changes of
        ``FIRN_WAREHOUSE`` do not move existing tables."""
        definition = TableSchema.build(name, schema, primary_key, partition_by)
        props = TableProperties.parse(properties)
        warehouse = self.warehouse
        try:
            with self.conn.transaction():
                row = self.conn.execute(
                    "INSERT INTO catalog_table (name, schema_ipc, primary_key, partition_by, "
                    "properties, location) VALUES (%s, %s, %s, %s, %s, '') RETURNING table_id",
                    (
                        name,
                        definition.to_ipc(),
                        list(definition.primary_key),
                        list(definition.partition_by),
                        json.dumps(props.as_dict()),
                    ),
                ).fetchone()
                assert row is not None
                location = join_location(warehouse, f"{name}-{row[0]}")
                self.conn.execute(
                    "UPDATE catalog_table SET location = %s WHERE table_id = %s",
                    (location, row[0]),
                )
        except psycopg.errors.UniqueViolation as exc:
            raise ConfigError(f"a table named {name!r} already exists") from exc
        log.info("created table %s at %s", name, location)
        return Table(self, row[0], definition, props, location)

    def table(self, name: str) -> Table:
        """The table called ``name``; ``ConfigError`` if there is none."""
        if not isinstance(name, str) or "\x00" in name:
            # Postgres cannot even compare such a name; no table can have it.
            raise ConfigError(f"no table named {name!r}")
        found = self._load("name = %s", name)
        if found is None:
            raise ConfigError(f"no table named {name!r}")
        return found

    def table_by_id(self, table_id: int) -> Table | None:
        """The table with this id, or None (never created, or dropped). Services find
        tables this way: by the id in the catalog row an event names, never by a
        name an event carries."""
        return self._load("table_id = %s", table_id)

    def _load(self, where: str, value: object) -> Table | None:
        row = self.conn.execute(
            "SELECT table_id, name, schema_ipc, primary_key, partition_by, properties, "
            f"location FROM catalog_table WHERE {where}",
            (value,),
        ).fetchone()
        if row is None:
            return None
        table_id, name, ipc, key, parts, props, location = row
        definition = TableSchema(name, TableSchema.schema_from_ipc(ipc), tuple(key), tuple(parts))
        properties = TableProperties.from_catalog(props, name)
        return Table(self, table_id, definition, properties, location)

    def tables(self) -> list[str]:
        rows = self.conn.execute("SELECT name FROM catalog_table ORDER BY name").fetchall()
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
