"""``firn iceberg properties|publish|tables`` and the publication in ``firn status`` on
the real catalog: ``firn.cli.main`` run as a user would, configured through FIRN_
variables, and the published table read back by pyiceberg with nothing but the
properties ``firn iceberg properties --json`` printed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

import firn
from firn.cli import main
from firn.iceberg.properties import catalog_properties
from firn.settings import FirnSettings

NAME = "sales.orders"
SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
    ]
)

Run = Callable[..., tuple[int, Any]]


@pytest.fixture
def catalog(cli_settings: FirnSettings) -> Iterator[firn.Catalog]:
    with firn.connect(settings=cli_settings) as catalog:
        yield catalog


@pytest.fixture
def run(cli_settings: FirnSettings, capsys: pytest.CaptureFixture[str]) -> Run:
    """``firn ARGS --json``: the exit status and the one JSON document it printed."""

    def invoke(*argv: str) -> tuple[int, Any]:
        code = main([*argv, "--json"])
        return code, json.loads(capsys.readouterr().out)

    return invoke


@pytest.fixture
def text(cli_settings: FirnSettings, capsys: pytest.CaptureFixture[str]) -> Run:
    """``firn ARGS``: the exit status and its stdout and stderr."""

    def invoke(*argv: str) -> tuple[int, Any]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, (captured.out, captured.err)

    return invoke


def rows(region: str, ids: range, tag: float) -> pa.Table:
    return pa.table(
        {"region": [region] * len(ids), "id": list(ids), "amount": [tag + i for i in ids]},
        schema=SCHEMA,
    )


def compacted_orders(catalog: firn.Catalog) -> firn.Table:
    table = catalog.create_table(NAME, SCHEMA, ["region", "id"], ["region"], {"base.buckets": 2})
    table.upsert(rows("eu", range(60), 0.5))
    table.upsert(rows("us", range(40), 1.5))
    table.upsert(rows("eu", range(10, 20), 100.0))
    table.delete(pa.table({"region": ["us"], "id": [3]}))
    firn.compact(table, kind="major", engine="local")
    return table


def by_key(rows: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((r["region"], r["id"], r["amount"]) for r in rows.to_pylist())


def test_a_published_table_reads_the_same_in_pyiceberg(
    run: Run, text: Run, catalog: firn.Catalog, cli_settings: FirnSettings
) -> None:
    table = compacted_orders(catalog)

    code, published = run("iceberg", "publish")  # every table that is due
    assert code == 0, published
    (publication,) = published["publications"]
    assert publication["table"] == NAME
    assert publication["outcome"] == "published"
    assert publication["identifier"] == NAME
    assert publication["firn_snapshot"] == table.status()["snapshot"]
    assert publication["bytes_written"] > 0
    assert publication["lag_seconds"] >= 0

    # --json is exactly load_catalog's properties: nothing else in the object.
    code, properties = run("iceberg", "properties")
    assert code == 0
    assert properties == catalog_properties(cli_settings)
    iceberg = load_catalog(cli_settings.iceberg_catalog, **properties).load_table(NAME)
    assert iceberg.metadata_location == publication["metadata_location"]
    assert by_key(iceberg.scan().to_arrow()) == by_key(table.read())
    assert ("us", 3) not in {(r, i) for r, i, _ in by_key(iceberg.scan().to_arrow())}

    code, listed = run("iceberg", "tables")
    assert code == 0
    (entry,) = listed["tables"]
    assert entry["table"] == NAME
    assert entry["identifier"] == NAME
    assert entry["state"] == "current"
    assert entry["metadata_location"] == publication["metadata_location"]
    assert entry["firn_snapshot"] == publication["firn_snapshot"]
    assert entry["published_at"] is not None
    assert entry["lag_seconds"] is not None
    assert entry["lag_seconds"] >= 0
    assert entry["last_error"] is None

    code, status = run("status")
    assert code == 0
    (shown,) = status["tables"]
    assert shown["publication"]["state"] == "current"
    assert shown["publication"]["firn_snapshot"] == publication["firn_snapshot"]
    assert shown["partitions"]  # the keys it had before are all still there
    code, (out, _) = text("status")
    assert code == 0
    assert "PUBLISHED" in out
    assert "lag " in out

    # Nothing new: unchanged, unless forced.
    code, again = run("iceberg", "publish", NAME)
    assert code == 0
    assert [p["outcome"] for p in again["publications"]] == ["unchanged"]
    code, forced = run("iceberg", "publish", NAME, "--force")
    assert [p["outcome"] for p in forced["publications"]] == ["published"]

    # A compaction makes it behind until it is published again.
    table.upsert(rows("us", range(5), 9.0))
    firn.compact(table, kind="major", engine="local")
    code, status = run("status")
    assert status["tables"][0]["publication"]["state"] == "behind"
    assert status["tables"][0]["publication"]["waiting_snapshots"] >= 1
    code, (out, _) = text("status")
    assert "behind " in out
    code, (out, _) = text("iceberg", "publish")
    assert code == 0
    assert NAME in out
    assert "published" in out
    newest = load_catalog(cli_settings.iceberg_catalog, **properties).load_table(NAME)
    assert by_key(newest.scan().to_arrow()) == by_key(table.read())
    code, listed = run("iceberg", "tables")
    assert listed["tables"][0]["state"] == "current"

    code, (out, _) = text("iceberg", "tables")
    assert code == 0
    assert NAME in out
    assert ".metadata.json" in out
    code, (out, _) = text("iceberg", "properties")
    assert code == 0
    assert f"load_catalog({cli_settings.iceberg_catalog!r}" in out
    assert properties["warehouse"] in out


def test_an_unknown_table_is_a_clear_error_and_nothing_is_published(
    run: Run, text: Run, catalog: firn.Catalog
) -> None:
    compacted_orders(catalog)
    code, failed = run("iceberg", "publish", NAME, "no.such")
    assert code == 1
    assert failed == {"error": "no table named 'no.such'"}
    code, (out, err) = text("iceberg", "publish", "no.such")
    assert code == 1
    assert out == ""
    assert "firn: error: no table named 'no.such'" in err
    code, listed = run("iceberg", "tables")
    assert [t["state"] for t in listed["tables"]] == ["never"]
    code, status = run("status")
    assert status["tables"][0]["publication"]["state"] == "never"
    # --force without names: every table, due or not.
    code, published = run("iceberg", "publish", "--force")
    assert code == 0
    assert [(p["table"], p["outcome"]) for p in published["publications"]] == [(NAME, "published")]


def test_a_table_not_published_is_off_and_nothing_is_due(run: Run, catalog: firn.Catalog) -> None:
    table = catalog.create_table(
        "sales.private", SCHEMA, ["region", "id"], properties={"iceberg.publish": False}
    )
    table.upsert(rows("eu", range(5), 0.0))
    firn.compact(table, kind="major", engine="local")
    code, published = run("iceberg", "publish")
    assert code == 0
    assert published == {"publications": []}
    code, status = run("status")
    assert status["tables"][0]["publication"]["state"] == "off"
    code, listed = run("iceberg", "tables")
    assert listed["tables"][0]["state"] == "off"
    assert listed["tables"][0]["identifier"] == "sales.private"
