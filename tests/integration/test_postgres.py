"""Schemas, migrations and the service registry against the real Postgres server."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from firn.errors import MigrationError
from firn.postgres import MIGRATIONS, applied_versions, apply_migrations, connect, registry
from firn.postgres.connection import Connection
from firn.settings import FirnSettings


def test_connection_creates_and_uses_its_own_schema(db: Connection, settings: FirnSettings) -> None:
    with db.transaction():
        db.execute("CREATE TABLE probe (id int PRIMARY KEY, note text)")
        db.execute("INSERT INTO probe VALUES (1, 'hello'), (2, 'world')")
    rows = db.execute(
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'probe'"
    ).fetchall()
    assert rows == [(settings.database_schema,)]
    assert db.execute("SELECT note FROM probe ORDER BY id").fetchall() == [("hello",), ("world",)]


def test_migrations_apply_once_and_are_recorded(db: Connection) -> None:
    assert apply_migrations(db) == [m.version for m in MIGRATIONS]
    assert apply_migrations(db) == []
    assert applied_versions(db) == [m.version for m in MIGRATIONS]


def test_concurrent_starts_apply_each_migration_exactly_once(settings: FirnSettings) -> None:
    applied: list[list[int]] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            conn = connect(settings)
            try:
                applied.append(apply_migrations(conn))
            finally:
                conn.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(v for versions in applied for v in versions) == [m.version for m in MIGRATIONS]


def test_an_edited_released_migration_is_refused(db: Connection) -> None:
    apply_migrations(db)
    edited = (replace(MIGRATIONS[0], sql=MIGRATIONS[0].sql + "\n-- edited"), *MIGRATIONS[1:])
    with pytest.raises(MigrationError, match="was changed after it was applied"):
        apply_migrations(db, edited)


def test_a_failing_migration_leaves_nothing_behind(db: Connection) -> None:
    broken = (
        *MIGRATIONS,
        replace(
            MIGRATIONS[0],
            version=len(MIGRATIONS) + 1,
            name="broken",
            sql="CREATE TABLE half (x int); SELEC 1",
        ),
    )
    with pytest.raises(MigrationError, match="broken"):
        apply_migrations(db, broken)
    db.rollback()
    tables = {
        r[0]
        for r in db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    }
    assert "half" not in tables
    assert "schema_version" not in tables  # the whole start-up transaction rolled back


def test_registry_counts_only_live_instances(db: Connection) -> None:
    apply_migrations(db)
    first = registry.register(db, "planner")
    second = registry.register(db, "planner")
    registry.register(db, "committer")
    registry.heartbeat(db, first)
    registry.deregister(db, second)
    assert registry.live_instances(db, within_seconds=60) == {"planner": 1, "committer": 1}
