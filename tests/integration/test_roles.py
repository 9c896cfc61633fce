"""Least privilege in the catalog, enforced by Postgres (migration 0018): a producer's
role commits change sets to the tables it was granted and nothing else, a reader's
role commits nothing, and every refusal is a clear error that changed nothing.

The roles log in for real (with the password ``firn grant`` made), so Postgres
itself does the refusing; no check here could pass on Python's word alone."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from pydantic import SecretStr

import firn
from firn.catalog.grants import FIRN_ROLES, service_login
from firn.cli import main
from firn.commands.output import Output
from firn.dashboard.server import Dashboard, Response
from firn.errors import AccessDeniedError
from firn.postgres.urls import url_as
from firn.settings import FirnSettings

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64())])


def changes(ids: range, amount: float, op: str = "U") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "amount": pa.array([amount] * len(ids), pa.float64()),
            "_op": pa.array([op] * len(ids), pa.string()),
        }
    )


def model(*commits: tuple[range, float, str]) -> dict[int, float]:
    """The reference: a dict applying each commit's operations in order."""
    rows: dict[int, float] = {}
    for ids, amount, op in commits:
        for i in ids:
            if op == "D":
                rows.pop(i, None)
            else:
                rows[i] = amount
    return rows


def contents(table: firn.Table) -> dict[int, float]:
    read = table.read().to_pydict()
    return dict(zip(read["id"], read["amount"], strict=True))


@pytest.fixture
def logins(settings: FirnSettings, unique: str) -> Iterator[Callable[[str], str]]:
    """Role names of this test's own (roles are the Postgres cluster's, shared by
    every schema), dropped afterwards with what they were granted."""
    made: list[str] = []

    def name(what: str) -> str:
        made.append(f"{what}_{unique}".lower())
        return made[-1]

    yield name
    with psycopg.connect(settings.database_dsn(), autocommit=True) as conn:
        for role in made:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def admin(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def as_role(settings: FirnSettings, url: str) -> FirnSettings:
    return settings.model_copy(update={"database_url": SecretStr(url)})


def test_a_producer_commits_to_its_table_and_nothing_else(
    admin: firn.Catalog,
    settings: FirnSettings,
    tmp_path: Path,
    logins: Callable[[str], str],
) -> None:
    admin.create_table("sales.mine", SCHEMA, ["id"])
    theirs = admin.create_table("sales.theirs", SCHEMA, ["id"])
    theirs.commit(changes(range(5), 1.0))
    granted = admin.grant("sales.mine", logins("producer"))
    assert granted.created
    assert granted.database_url is not None
    assert granted.password is not None
    assert granted.password not in repr(granted)
    before = {name: admin.table(name).current_snapshot() for name in ("sales.mine", "sales.theirs")}

    with firn.connect(
        warehouse=str(tmp_path), settings=as_role(settings, granted.database_url)
    ) as producer:
        table = producer.table("sales.mine")
        table.commit(changes(range(10), 1.0))
        table.commit(changes(range(3), 0.0, "D"))
        assert contents(table) == model((range(10), 1.0, "U"), (range(3), 0.0, "D"))
        assert contents(producer.table("sales.theirs")) == model((range(5), 1.0, "U"))

        with pytest.raises(AccessDeniedError, match=r"may not commit to table sales\.theirs"):
            producer.table("sales.theirs").commit(changes(range(5), 9.0))
        with pytest.raises(AccessDeniedError, match="bulk load"):
            table.load(changes(range(4), 2.0).drop_columns(["_op"]))
        with pytest.raises(AccessDeniedError, match="admin"):
            producer.grant("sales.theirs", granted.role)
        with pytest.raises(AccessDeniedError):
            table.set_properties({"minor.file-count": 3})

    assert admin.table("sales.theirs").current_snapshot() == before["sales.theirs"]
    assert contents(admin.table("sales.theirs")) == model((range(5), 1.0, "U"))
    assert admin.table("sales.mine").current_snapshot() == before["sales.mine"] + 2
    assert admin.table("sales.mine").properties.minor_file_count != 3
    assert not _staged(admin, theirs.table_id)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE data_file SET removed_snapshot = added_snapshot",
        "DELETE FROM data_file",
        "INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, "
        "seq, path, size_bytes, record_count, added_snapshot) "
        "SELECT table_id, '', 'change', 'I', 1, 0, 99, 'forged.parquet', 1, 1, 1 "
        "FROM catalog_table",
        "UPDATE compaction_task SET state = 'Committed'",
        "UPDATE compaction_plan SET state = 'Failed'",
        "INSERT INTO table_grant (table_id, role_name) SELECT table_id, current_user "
        "FROM catalog_table",
        "UPDATE catalog_table SET last_seq = last_seq + 1",
        "DROP TABLE data_file",
        "SELECT * FROM firn_register_commit("
        "(SELECT table_id FROM catalog_table WHERE name = 'sales.theirs'), '[]', NULL, NULL, NULL)",
    ],
)
def test_a_producer_role_cannot_write_catalog_rows_directly(
    admin: firn.Catalog, settings: FirnSettings, logins: Callable[[str], str], statement: str
) -> None:
    admin.create_table("sales.mine", SCHEMA, ["id"]).commit(changes(range(3), 1.0))
    admin.create_table("sales.theirs", SCHEMA, ["id"]).commit(changes(range(3), 1.0))
    granted = admin.grant("sales.mine", logins("producer"))
    assert granted.database_url is not None
    fingerprint = _fingerprint(admin)

    with psycopg.connect(granted.database_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.database_schema))
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)

    assert _fingerprint(admin) == fingerprint


def test_a_reader_reads_and_cannot_commit(
    admin: firn.Catalog, settings: FirnSettings, tmp_path: Path, logins: Callable[[str], str]
) -> None:
    admin.create_table("sales.mine", SCHEMA, ["id"]).commit(changes(range(4), 1.0))
    reader = logins("reader")
    with psycopg.connect(settings.database_dsn(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'read-only' IN ROLE firn_reader").format(
                sql.Identifier(reader)
            )
        )
    url = url_as(settings.database_dsn(), reader, "read-only")
    snapshot = admin.table("sales.mine").current_snapshot()

    with firn.connect(warehouse=str(tmp_path), settings=as_role(settings, url)) as catalog:
        table = catalog.table("sales.mine")
        assert contents(table) == model((range(4), 1.0, "U"))
        with pytest.raises(AccessDeniedError, match=rf"refused staging files to role '{reader}'"):
            table.commit(changes(range(2), 5.0))

    assert admin.table("sales.mine").current_snapshot() == snapshot


def test_firn_grant_prints_a_url_a_producer_commits_with_until_revoked(
    admin: firn.Catalog,
    settings: FirnSettings,
    tmp_path: Path,
    logins: Callable[[str], str],
    as_a_user: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The CLI reads the admin's settings from the environment (``as_a_user``)."""
    admin.create_table("sales.mine", SCHEMA, ["id"])
    role = logins("producer")

    assert main(["grant", "sales.mine", role, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["role"] == role
    assert printed["created"] is True
    assert main(["grant", "sales.mine", role, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["created"] is False

    producer_settings = as_role(settings, printed["database_url"])
    with firn.connect(warehouse=str(tmp_path), settings=producer_settings) as producer:
        producer.table("sales.mine").commit(changes(range(3), 1.0))
        assert main(["revoke", "sales.mine", role, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["revoked"] is True
        with pytest.raises(AccessDeniedError):
            producer.table("sales.mine").commit(changes(range(3), 2.0))
        assert contents(producer.table("sales.mine")) == model((range(3), 1.0, "U"))

    assert main(["grant", "sales.mine", "Not A Role", "--json"]) == 1
    assert "role name" in json.loads(capsys.readouterr().out)["error"]


def _staged(catalog: firn.Catalog, table_id: int) -> list[str]:
    rows = catalog.conn.execute(
        "SELECT path FROM orphan_file WHERE table_id = %s", (table_id,)
    ).fetchall()
    return [row[0] for row in rows]


def _fingerprint(catalog: firn.Catalog) -> list[tuple[object, ...]]:
    """Every row a refused statement could have touched."""
    return [
        *catalog.conn.execute(
            "SELECT file_id, path, removed_snapshot FROM data_file ORDER BY file_id"
        ).fetchall(),
        *catalog.conn.execute("SELECT table_id, last_seq FROM catalog_table ORDER BY 1").fetchall(),
        *catalog.conn.execute(
            "SELECT table_id, role_name FROM table_grant ORDER BY 1, 2"
        ).fetchall(),
        *catalog.conn.execute("SELECT plan_id, state FROM compaction_plan ORDER BY 1").fetchall(),
    ]


def test_the_dashboard_takes_a_compaction_request_only_from_an_operator_login(
    admin: firn.Catalog,
    settings: FirnSettings,
    logins: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin.create_table("sales.mine", SCHEMA, ["id"]).commit(changes(range(4), 1.0))
    operator, producer = logins("operator"), logins("producer")
    with psycopg.connect(settings.database_dsn(), autocommit=True) as conn:
        for role, group in ((operator, "firn_operator"), (producer, "firn_producer")):
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                    sql.Identifier(role), sql.Literal(f"pw-{role}"), sql.Identifier(group)
                )
            )
    caplog.set_level(logging.INFO, logger="firn.dashboard.server")
    asked: list[tuple[str, str | None, str]] = []

    def request(_: FirnSettings, table: firn.Table, partition: str | None, kind: str) -> Output:
        asked.append((table.name, partition, kind))
        return Output({}, "requested")

    with contextlib.closing(
        Dashboard(settings.model_copy(update={"dashboard_operators": True}), request=request)
    ) as dashboard:
        page = dashboard.get("/table?name=sales.mine")
        assert 'name="role"' in page.html
        assert 'name="token"' not in page.html

        def ask(role: str, password: str) -> Response:
            form = {"table": "sales.mine", "kind": "major", "role": role, "password": password}
            return dashboard.post("/compact", form)

        refused = [ask(producer, f"pw-{producer}"), ask(operator, "wrong"), ask("", "")]
        assert [r.status for r in refused] == [403, 403, 403]
        assert f"role {producer} may not request compactions" in refused[0].html
        assert "wrong role or password" in refused[1].html
        assert asked == []

        accepted = ask(operator, f"pw-{operator}")
        assert accepted.status == 200, accepted.html
        assert asked == [("sales.mine", None, "major")]
        assert f"requested by role {operator}" in caplog.text
        for secret in (f"pw-{operator}", f"pw-{producer}"):
            assert secret not in caplog.text
            assert all(secret not in r.html for r in [*refused, accepted])


@pytest.mark.parametrize(
    ("service", "statement"),
    [
        ("metrics", "UPDATE compaction_task SET state = 'Committed'"),
        ("planner", "UPDATE data_file SET removed_snapshot = added_snapshot"),
        ("planner", "UPDATE catalog_partition SET max_merged_seq = max_seq"),
        ("dispatcher", "UPDATE catalog_table SET last_seq = last_seq + 1"),
        ("dispatcher", "DELETE FROM data_file"),
        ("committer", "INSERT INTO table_grant (table_id, role_name) "
         "SELECT table_id, current_user FROM catalog_table"),
        ("committer", "UPDATE catalog_table SET properties = '{}'"),
        ("publisher", "UPDATE compaction_plan SET state = 'Failed'"),
    ],
)  # fmt: skip
def test_a_service_role_writes_only_its_own_rows(
    admin: firn.Catalog, settings: FirnSettings, service: str, statement: str
) -> None:
    admin.create_table("sales.mine", SCHEMA, ["id"]).commit(changes(range(3), 1.0))
    password = f"test-{service}-{uuid.uuid4().hex}"
    role = service_login(admin.conn, service, password)
    fingerprint = _fingerprint(admin)

    with psycopg.connect(url_as(settings.database_dsn(), role, password), autocommit=True) as conn:
        conn.execute(
            sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.database_schema))
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)

    assert _fingerprint(admin) == fingerprint


def test_every_firn_role_reads_every_catalog_table_and_no_one_else_writes(
    admin: firn.Catalog, settings: FirnSettings
) -> None:
    """Catches a later migration's table that no grant reaches."""
    roles = [*FIRN_ROLES]
    missing = admin.conn.execute(
        "SELECT r.rolname, c.relname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace CROSS JOIN pg_roles r "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'S') AND r.rolname = ANY(%s) "
        "AND NOT has_table_privilege(r.oid, c.oid, 'SELECT') ORDER BY 1, 2",
        (settings.database_schema, roles),
    ).fetchall()
    assert missing == []
    public = admin.conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' "
        "AND has_table_privilege('public', c.oid, 'SELECT, INSERT, UPDATE, DELETE')",
        (settings.database_schema,),
    ).fetchall()
    assert public == []
