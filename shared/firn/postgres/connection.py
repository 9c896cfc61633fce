"""Connections to the catalog, pinned to Firn's schema through ``search_path``."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from firn.errors import ServiceError
from firn.settings import FirnSettings

Connection = psycopg.Connection[TupleRow]
"""A catalog connection with tuple rows."""


def connect(settings: FirnSettings, *, autocommit: bool = False) -> Connection:
    """Open a connection whose unqualified names resolve in ``settings.database_schema``.

    The schema is created when missing, so a fresh database (or a fresh per-test schema)
    needs nothing done by hand.
    """
    dsn = settings.database_dsn()
    schema = settings.database_schema
    try:
        conn = psycopg.connect(
            dsn, autocommit=True, connect_timeout=10, application_name=settings.application_name
        )
    except psycopg.OperationalError as exc:
        raise ServiceError(f"cannot connect to Postgres: {exc}") from exc
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.autocommit = autocommit
    return conn
