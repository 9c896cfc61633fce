"""Who may commit to which table (migration 0018): ``table_grant`` rows and the login
roles they name.

A producer's role commits only through the catalog's ``firn_register_commit`` and
its staging functions, which check ``table_grant``; the role itself holds nothing
but ``firn_producer`` (read every catalog row, call those functions). Only the
catalog's owner, its admin, writes grants.

A new login role gets a random password, sent to Postgres as a SCRAM verifier
computed here (as ``psql``'s ``\\password`` does), so the password itself never
reaches the server's statement log.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

import psycopg
from psycopg import sql

from firn.errors import AccessDeniedError, ConfigError
from firn.postgres.connection import Connection

PRODUCER = "firn_producer"
"""The group role every producer's login joins."""

FIRN_ROLES = (
    "firn_reader",
    PRODUCER,
    "firn_metrics",
    "firn_planner",
    "firn_dispatcher",
    "firn_committer",
    "firn_publisher",
    "firn_operator",
)
"""The group roles migration 0018 creates; none of them is granted a table."""

_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class Grant:
    """A producer role's access to one table."""

    table: str
    role: str
    created: bool
    """Whether the login role was created now (with ``password``)."""
    password: str | None = None
    database_url: str | None = None
    """A URL that logs in as ``role`` (with ``password`` when it was created now),
    for the producer's ``FIRN_DATABASE_URL``; set by ``firn.Catalog.grant``."""

    def __repr__(self) -> str:
        return f"Grant(table={self.table!r}, role={self.role!r}, created={self.created})"


def check_role_name(role: str) -> str:
    """``role`` when it can name a producer's role: lower-case letters, digits and
    ``_``, at most 63, not one of Postgres's ``pg_`` roles or Firn's group roles."""
    if not _ROLE_NAME.fullmatch(role):
        raise ConfigError(
            f"role name {role!r}: use lower-case letters, digits and _ (at most 63, "
            "not starting with a digit)"
        )
    if role.startswith("pg_") or role in FIRN_ROLES:
        raise ConfigError(f"role {role!r} is reserved; name the producer's own role")
    return role


def grant_commit(conn: Connection, table_id: int, table: str, role: str) -> Grant:
    """Let ``role`` commit to the table, creating it as a login role (with a new
    password) when it does not exist; in one transaction."""
    check_role_name(role)
    try:
        with conn.transaction():
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            password = None
            if exists is None:
                password = secrets.token_urlsafe(24)
                verifier = conn.pgconn.encrypt_password(
                    password.encode(), role.encode(), b"scram-sha-256"
                ).decode()
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(role), sql.Literal(verifier)
                    )
                )
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(PRODUCER), sql.Identifier(role))
            )
            conn.execute(
                "INSERT INTO table_grant (table_id, role_name) VALUES (%s, %s) "
                "ON CONFLICT DO NOTHING",
                (table_id, role),
            )
    except psycopg.errors.InsufficientPrivilege as exc:
        raise AccessDeniedError(
            f"only the catalog's admin may grant tables (role {conn.info.user!r} may not): "
            f"{exc.diag.message_primary}"
        ) from exc
    return Grant(table, role, created=password is not None, password=password)


def revoke_commit(conn: Connection, table_id: int, role: str) -> bool:
    """Take ``role``'s grant on the table away; whether it had one. The login role
    stays (it may hold other tables), and so does its ``firn_producer`` membership."""
    try:
        with conn.transaction():
            removed = conn.execute(
                "DELETE FROM table_grant WHERE table_id = %s AND role_name = %s", (table_id, role)
            ).rowcount
    except psycopg.errors.InsufficientPrivilege as exc:
        raise AccessDeniedError(
            f"only the catalog's admin may revoke grants (role {conn.info.user!r} may not): "
            f"{exc.diag.message_primary}"
        ) from exc
    return removed > 0


def granted_roles(conn: Connection, table_id: int) -> list[str]:
    """The roles that may commit to the table, besides the catalog's admin."""
    rows = conn.execute(
        "SELECT role_name FROM table_grant WHERE table_id = %s ORDER BY role_name", (table_id,)
    ).fetchall()
    return [row[0] for row in rows]


SERVICES = ("metrics", "planner", "dispatcher", "committer", "publisher")
"""The services with a group role of their own (``firn_<service>``)."""


def service_role(service: str) -> str:
    """The group role of a service's members."""
    if service not in SERVICES:
        raise ConfigError(f"no service called {service!r}; the services are {', '.join(SERVICES)}")
    return f"firn_{service}"


def service_login(conn: Connection, service: str, password: str) -> str:
    """Make ``firn_<service>_login`` a login role of the service's group with
    ``password`` (created, or its password set again); return its name. For stacks
    that run each service as its own role (``firn up``, compose, the tests)."""
    group = service_role(service)
    login = f"{group}_login"
    verifier = conn.pgconn.encrypt_password(
        password.encode(), login.encode(), b"scram-sha-256"
    ).decode()
    try:
        with conn.transaction():
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone()
            verb = "ALTER" if exists else "CREATE"
            conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(login), sql.Literal(verifier)
                )
            )
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(login))
            )
    except psycopg.errors.InsufficientPrivilege as exc:
        raise AccessDeniedError(
            f"only the catalog's admin may make service logins (role {conn.info.user!r} may "
            f"not): {exc.diag.message_primary}"
        ) from exc
    return login
