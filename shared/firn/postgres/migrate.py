"""Versioned SQL migrations, applied at start-up, idempotent, recorded in a table.

Migrations are the files ``firn/migrations/NNNN_name.sql``, applied in version order,
each together with its row in ``schema_version``, all that are missing in one
transaction: a failed start-up leaves the schema exactly as it found it. Several
processes may start at once: a transaction-scoped advisory lock keyed on the schema
lets exactly one of them apply what is missing while the others wait and then find
nothing left to do. A recorded migration whose file has changed is an error, never
re-applied: released SQL is immutable.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import psycopg

from firn.errors import MigrationError
from firn.postgres.connection import Connection

log = logging.getLogger(__name__)

_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    """One versioned SQL file."""

    version: int
    """Position in the sequence; the four digits of the file name."""
    name: str
    """The rest of the file name, for people."""
    sql: str
    """The statements, run in one transaction."""

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(folder: Traversable | None = None) -> tuple[Migration, ...]:
    """Read the migrations (the packaged ones by default), checking they are 1..N."""
    folder = folder or resources.files("firn").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _NAME.fullmatch(entry.name)
        if match is None:
            if entry.name.endswith(".sql"):
                raise MigrationError(f"migration file {entry.name!r} is not named NNNN_name.sql")
            continue
        found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration versions must be 1..N without gaps, got {versions}")
    return tuple(found)


MIGRATIONS = load_migrations()

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


def apply_migrations(
    conn: Connection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
) -> list[int]:
    """Bring the connection's schema up to date; return the versions applied now."""
    applied_now: list[int] = []
    if conn.autocommit:
        raise MigrationError("apply_migrations needs a connection with autocommit off")
    missing = _missing(conn, migrations)
    if not missing:
        return applied_now
    if not _owns_schema(conn):
        raise MigrationError(
            f"the catalog needs migrations {', '.join(f'{m.version:04d}' for m in missing)}, "
            f"which only its owner may apply, not role {conn.info.user!r}: run any firn "
            "command once with the admin's database URL (for example `firn status`)"
        )
    with conn.transaction():
        schema = conn.execute("SELECT current_schema()").fetchone()
        if schema is None or schema[0] is None:
            raise MigrationError("the connection has no current schema")
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('firn.migrate.' || %s))", (schema[0],))
        conn.execute(_VERSION_TABLE)
        rows = conn.execute("SELECT version, checksum FROM schema_version").fetchall()
        recorded: dict[int, str] = dict(rows)
        for migration in migrations:
            checksum = recorded.get(migration.version)
            if checksum is not None:
                if checksum != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name} was changed "
                        f"after it was applied to schema {schema[0]!r}; add a new migration "
                        "instead of editing a released one"
                    )
                continue
            try:
                with conn.transaction():
                    conn.execute(migration.sql.encode())
                    conn.execute(
                        "INSERT INTO schema_version (version, name, checksum) VALUES (%s, %s, %s)",
                        (migration.version, migration.name, migration.checksum),
                    )
            except psycopg.Error as exc:
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} failed: {exc}"
                ) from exc
            applied_now.append(migration.version)
            log.info(
                "applied migration %04d_%s to schema %s",
                migration.version,
                migration.name,
                schema[0],
            )
    return applied_now


def _missing(conn: Connection, migrations: tuple[Migration, ...]) -> list[Migration]:
    """The migrations not recorded yet, read without taking a lock or creating
    anything: every role may ask, and an up-to-date catalog (nearly every start-up)
    needs nothing more. A changed migration among them is refused under the lock."""
    with conn.transaction():
        row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
        if not (row and row[0]):
            return list(migrations)
        rows = conn.execute("SELECT version, checksum FROM schema_version").fetchall()
        recorded: dict[int, str] = dict(rows)
    return [m for m in migrations if recorded.get(m.version) != m.checksum]


def _owns_schema(conn: Connection) -> bool:
    row = conn.execute(
        "SELECT pg_has_role(current_user, nspowner, 'USAGE') FROM pg_namespace "
        "WHERE nspname = current_schema()"
    ).fetchone()
    conn.rollback()
    return bool(row and row[0])


def applied_versions(conn: Connection) -> list[int]:
    rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    return [row[0] for row in rows]
