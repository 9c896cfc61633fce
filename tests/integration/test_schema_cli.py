"""``firn schema`` and ``firn alter`` on the real catalog: ``firn.cli.main`` run as a
user would (FIRN_ variables, the fixtures of ``test_cli_commands``), its output read
back and held to what the Python API sees."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

import firn
from firn.catalog.history import schema_history
from firn.cli import main
from firn.dashboard.views import table_view
from tests.integration import test_cli_commands
from tests.integration.test_cli_commands import Run, make_orders, rows

# The CLI tests' fixtures (cli_settings: settings in FIRN_ variables, in conftest), a
# catalog, ``firn ... --json``.
catalog = test_cli_commands.catalog
run = test_cli_commands.run


def by_id(table: firn.Table) -> dict[int, dict[str, object]]:
    return {r["id"]: r for r in table.read().to_pylist()}


def test_alter_applies_its_operations_in_order_as_one_version(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    table = make_orders(run, catalog)
    table.upsert(rows("eu", range(5), 0.5))
    before = table.current_snapshot()

    code, altered = run(
        "alter", "orders",
        "--add", "discount:decimal(12,2)=0.5",
        "--doc", "discount:in EUR: before tax",
        "--rename", "amount:total",
        "--add", "qty:int32=1",
        "--widen", "qty:int64",
        "--add-required", "shipped:bool=false",
        "--add", "note:string",
        "--add", "at:timestamp[us, tz=UTC]=2024-01-01T12:00:00",
        "--after", "discount:id",
        "--first", "shipped",
    )  # fmt: skip
    assert code == 0, altered
    assert altered["changed"] is True
    assert altered["schema_id"] == 1
    assert altered["snapshot_id"] == before + 1
    assert altered["changes"] == [
        "add discount decimal128(12, 2)",
        "doc discount",
        "rename amount -> total",
        "add qty int32",
        "widen qty to int64",
        "add shipped bool",
        "add note string",
        "add at timestamp[us, tz=UTC]",
        "move discount after id",
        "move shipped first",
    ]

    # One new version, as the API sees it; rows written before read the defaults.
    table.refresh()
    assert [v.schema_id for v in table.schemas()] == [0, 1]
    assert table.schema.names == [
        "shipped", "region", "id", "discount", "total", "qty", "note", "at",
    ]  # fmt: skip
    assert table.schema.field("qty").type == pa.int64()
    assert not table.schema.field("shipped").nullable
    row = by_id(table)[3]
    assert row == {
        "shipped": False, "region": "eu", "id": 3, "discount": Decimal("0.50"), "total": 3.5,
        "qty": 1, "note": None, "at": dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC),
    }  # fmt: skip

    code, shown = run("schema", "orders")
    assert code == 0, shown
    assert shown["table"] == "orders"
    assert shown["schema_id"] == 1
    columns = {c["name"]: c for c in shown["columns"]}
    assert [c["name"] for c in shown["columns"]] == table.schema.names
    assert columns["discount"] == {
        "id": 4, "name": "discount", "type": "decimal128(12, 2)", "required": False,
        "default": "0.50", "doc": "in EUR: before tax", "key": False, "partition": False,
    }  # fmt: skip
    assert columns["region"] | {"id": None} == {
        "id": None, "name": "region", "type": "string", "required": True, "default": None,
        "doc": None, "key": True, "partition": True,
    }  # fmt: skip
    assert columns["total"]["id"] == 3  # the renamed column keeps its field id
    assert columns["shipped"]["default"] is False
    assert columns["at"]["default"] == "2024-01-01T12:00:00+00:00"
    first, second = shown["versions"]
    assert (first["schema_id"], first["snapshot_id"], first["changes"]) == (0, 0, [])
    assert first["columns"] == ["region", "id", "amount"]
    assert (second["schema_id"], second["snapshot_id"]) == (1, before + 1)
    assert second["changes"] == altered["changes"]
    assert second["columns"] == table.schema.names
    assert dt.datetime.fromisoformat(second["created_at"]).tzinfo is not None

    # The same for people.
    assert main(["schema", "orders"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("table orders: schema version 1 (2 versions)")
    assert "discount  decimal128(12, 2)" in text
    assert "key, partition" in text
    assert "(as created)" in text
    assert "move shipped first" in text


def test_a_refused_alter_changes_nothing(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    table = make_orders(run, catalog)
    assert run("alter", "orders", "--add", "note:string")[0] == 0
    table.refresh()
    snapshot, schema = table.current_snapshot(), table.schema

    refusals = [
        (("--add", "x:int64", "--drop", "id"), "--drop id: cannot delete column 'id': it is a "
         "primary key column"),
        (("--add", "x:int64", "--widen", "note:int64"), "--widen note:int64: cannot change "
         "column 'note' from string to int64"),
        (("--rename", "region:zone"), "it is a partition column"),
        (("--drop", "nope"), "has no column 'nope'"),
        (("--add", "x:int8=300"), "default 300 of column 'x' is not a value of its type int8"),
        (("--add", "x:varchar"), "unknown column type 'varchar'"),
        ((), "firn alter needs at least one operation"),
    ]  # fmt: skip
    for operations, message in refusals:
        code, doc = run("alter", "orders", *operations)
        assert code == 1, (operations, doc)
        assert message in doc["error"], (operations, doc)
    # Without --json: the message on stderr, nothing on stdout.
    assert main(["alter", "orders", "--drop", "id"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("firn: error: --drop id: cannot delete column 'id'")
    assert run("alter", "nope", "--drop", "x") == (1, {"error": "no table named 'nope'"})

    table.refresh()
    assert [v.schema_id for v in table.schemas()] == [0, 1]
    assert table.current_snapshot() == snapshot
    assert table.schema.equals(schema, check_metadata=True)


def test_a_dry_run_shows_the_result_and_commits_nothing(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    table = make_orders(run, catalog)
    snapshot = table.current_snapshot()

    code, planned = run(
        "alter", "orders", "--add", "note:string=n/a", "--rename", "amount:total",
        "--first", "note", "--dry-run",
    )  # fmt: skip
    assert code == 0, planned
    assert (planned["dry_run"], planned["changed"], planned["schema_id"]) == (True, True, 1)
    assert planned["changes"] == ["add note string", "rename amount -> total", "move note first"]
    assert [c["name"] for c in planned["columns"]] == ["note", "region", "id", "total"]
    assert planned["columns"][0]["default"] == "n/a"
    # A dry run is refused as the real one would be.
    code, doc = run("alter", "orders", "--drop", "region", "--dry-run")
    assert code == 1
    assert "partition column" in doc["error"]
    code, unchanged = run("alter", "orders", "--rename", "amount:amount", "--dry-run")
    assert (code, unchanged["changed"], unchanged["changes"]) == (0, False, [])

    assert main(["alter", "orders", "--drop", "amount", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("table orders: would make schema version 1 (dry run, nothing committed)")

    table.refresh()
    assert [v.schema_id for v in table.schemas()] == [0]
    assert table.schema.names == ["region", "id", "amount"]
    assert table.current_snapshot() == snapshot

    # An alter that changes nothing makes no version either.
    code, same = run("alter", "orders", "--rename", "amount:amount")
    assert (code, same["changed"], same["schema_id"]) == (0, False, 0)
    assert [v.schema_id for v in table.schemas()] == [0]


def test_the_dashboard_shows_what_alter_did(run: Run, catalog: firn.Catalog) -> None:
    """The table page's schema section from the real ``table_schema`` rows."""
    table = make_orders(run, catalog)
    code, altered = run(
        "alter", "orders", "--add", "note:string=<none>", "--doc", "note:free text",
        "--rename", "amount:total",
    )  # fmt: skip
    assert code == 0, altered

    versions = schema_history(catalog.conn, table.table_id)
    assert [(v.schema_id, v.snapshot_id) for v in versions] == [(0, 0), (1, altered["snapshot_id"])]
    assert versions[0].changes == ()
    assert list(versions[1].changes) == altered["changes"]
    assert [c.name for c in versions[1].columns] == ["region", "id", "total", "note"]
    note = versions[1].columns[-1]
    assert (note.field_id, note.default, note.doc) == (4, "<none>", "free text")
    assert versions[1].created_at is not None

    html = table_view(catalog, "orders", action_enabled=False)
    assert '<tr data-column="note">' in html
    assert '<td class="default">&quot;&lt;none&gt;&quot;</td>' in html
    assert "rename amount -&gt; total" in html
