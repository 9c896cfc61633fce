"""Connections to the catalog, pinned to Firn's schema through ``search_path``."""

from __future__ import annotations

import contextlib
import math

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from firn.errors import AccessDeniedError, ServiceError
from firn.sensors import sensors
from firn.settings import FirnSettings

Connection = psycopg.Connection[TupleRow]
"""A catalog connection with tuple rows."""


def connect(
    settings: FirnSettings, *, autocommit: bool = False, connect_timeout: float = 10.0
) -> Connection:
    """Open a connection whose unqualified names resolve in ``settings.database_schema``.

    The schema is created when missing, so a fresh database (or a fresh per-test schema)
    needs nothing done by hand. ``connect_timeout`` is in whole seconds, at least 2
    (libpq's floor).
    """
    dsn = settings.database_dsn()
    schema = settings.database_schema
    try:
        conn = psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=max(2, math.ceil(connect_timeout)),
            application_name=settings.application_name,
        )
    except psycopg.OperationalError as exc:
        sensors().postgres_error(type(exc).__name__)
        raise ServiceError(f"cannot connect to Postgres: {exc}") from exc
    try:
        if not _schema_exists(conn, schema):
            _create_schema(conn, schema)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.autocommit = autocommit
    except BaseException:
        conn.close()
        raise
    return conn


def _schema_exists(conn: Connection, schema: str) -> bool:
    """Asked first: ``CREATE SCHEMA IF NOT EXISTS`` needs the right to create one even
    when it exists, which a producer's or a service's role does not have."""
    row = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (f'"{schema}"',)).fetchone()
    return bool(row and row[0])


def access_denied(conn: Connection, exc: BaseException, what: str) -> AccessDeniedError | None:
    """``exc`` as the Firn error when it is Postgres refusing the connection's role
    (SQLSTATE 42501: a missing grant, a table not granted to a producer); else None."""
    if not isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return None
    hint = exc.diag.message_hint
    return AccessDeniedError(
        f"the catalog refused {what} to role {conn.info.user!r}: {exc.diag.message_primary}"
        + (f" ({hint})" if hint else "")
    )


def _create_schema(conn: Connection, schema: str) -> None:
    """Create ``schema`` unless it exists. ``IF NOT EXISTS`` is not atomic: two
    services starting at once can both miss the schema and one then fails on the
    catalog's unique index; the schema exists either way, which is all we need."""
    with contextlib.suppress(psycopg.errors.UniqueViolation):
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,  # connection lost, server restarting, deadlock, serialization
    psycopg.InterfaceError,  # the connection was already closed under us
)
"""Postgres errors after which the same work, retried on a fresh connection, may
succeed. Deadlocks and serialization failures are ``TransactionRollback``, an
``OperationalError``: the whole transaction is retried, never a part of it."""


class ReconnectingConnection:
    """One catalog connection, opened again when it is found broken (a Postgres
    restart, a network blip). Callers ask for ``.conn`` at each use instead of keeping
    the connection, so a service outlives any number of database restarts; the work
    that was cut off fails with a transient error and is retried by its caller."""

    def __init__(
        self,
        settings: FirnSettings,
        *,
        autocommit: bool = True,
        conn: Connection | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self._settings = settings
        self._connect_timeout = connect_timeout
        self._autocommit = autocommit
        self._conn = conn
        self._closed = False
        self.reconnects = 0
        """How many times the connection was opened again after breaking."""

    @property
    def conn(self) -> Connection:
        if self._closed:
            raise ServiceError("the catalog connection was closed", retryable=False)
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self._conn.close()
            self._conn = None
            self.reconnects += 1
            sensors().postgres_reconnected()
        if self._conn is None:
            self._conn = connect(
                self._settings, autocommit=self._autocommit, connect_timeout=self._connect_timeout
            )
        return self._conn

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
