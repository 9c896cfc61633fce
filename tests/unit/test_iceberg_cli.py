"""``firn iceberg``, the publication column of ``firn status`` and the dashboard's
publication parts, from plain data: formatting and rendering only (the integration
test ``tests/integration/test_iceberg_cli.py`` runs them on the real catalog)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

import pytest
from pydantic import SecretStr

from firn.catalog.publication import LagPoint, PublicationStatus
from firn.cli import build_parser, main
from firn.commands import iceberg
from firn.commands.status import _status_text
from firn.dashboard import pages
from firn.dashboard.charts import lag_chart
from firn.iceberg.properties import catalog_properties
from firn.readable import duration, freshness
from firn.settings import FirnSettings

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def publication(**fields: Any) -> PublicationStatus:
    values: dict[str, Any] = {
        "table": "sales.orders",
        "table_id": 1,
        "publish": True,
        "catalog_name": "firn",
        "identifier": "sales.orders",
        "metadata_location": "file:///w/sales.orders-1/_iceberg/metadata/00001-a.metadata.json",
        "firn_snapshot": 6,
        "published_at": T0,
        "lag_seconds": 1.25,
        "waiting_snapshots": 0,
        "behind_seconds": None,
        "last_error": None,
        "error_at": None,
    }
    return PublicationStatus(**{**values, **fields})


def status(pub: PublicationStatus | None) -> dict[str, Any]:
    return {
        "table": "sales.orders",
        "seq": 3,
        "snapshot": 6,
        "partitions": [
            {
                "partition": "region=eu",
                "max_merged_seq": 3,
                "max_seq": 3,
                "unmerged_files": 0,
                "unmerged_bytes": 0,
                "max_runs_per_node": 0,
                "score": 0.0,
                "due": None,
                "reasons": [],
                "open_plan": None,
                "last_compaction": None,
            }
        ],
        "publication": None if pub is None else pub.as_dict(),
    }


# --- the state and its words


def test_the_state_of_a_publication() -> None:
    assert publication().state == "current"
    assert publication(waiting_snapshots=2, behind_seconds=40.0).state == "behind"
    assert publication(published_at=None, firn_snapshot=None).state == "never"
    assert publication(last_error="OSError: disk full").state == "error"
    assert publication(publish=False, last_error="x").state == "off"


def test_freshness_in_a_word_or_two() -> None:
    assert freshness(publication().as_dict()) == "lag 1.2s"
    behind = publication(waiting_snapshots=1, behind_seconds=75.0)
    assert freshness(behind.as_dict()) == "behind 1m15s"
    assert freshness(publication(publish=False).as_dict()) == "off"
    assert freshness(publication(last_error="boom").as_dict()) == "error"
    assert freshness(publication(published_at=None).as_dict()) == "never"
    assert freshness(None) == "-"


def test_durations_for_people() -> None:
    assert [duration(s) for s in (0.04, 9.96, 42.4, 185, 7620)] == [
        "0.0s",
        "10.0s",
        "42s",
        "3m05s",
        "2h07m",
    ]


def test_the_json_form_is_plain_data() -> None:
    data = publication(error_at=T0, last_error="boom").as_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["published_at"] == "2026-01-01T00:00:00+00:00"
    assert data["state"] == "error"


# --- firn status


def test_status_has_a_published_column_and_says_why_publication_failed() -> None:
    text = _status_text([status(publication())])
    assert isinstance(text, list)
    header, row = str(text[0]).splitlines()
    assert header.split()[-1] == "PUBLISHED"
    assert row.endswith("lag 1.2s")
    failed = _status_text([status(publication(last_error="OSError: disk full"))])
    assert isinstance(failed, list)
    assert str(failed[0]).splitlines()[1].endswith("error")
    assert "  sales.orders: Iceberg publication failed: OSError: disk full" in failed
    # A status without the key (an older catalog's shape) still prints.
    old = status(None)
    del old["publication"]
    assert str(_status_text([old])[0]).splitlines()[1].endswith("-")


# --- firn iceberg


def test_every_iceberg_command_accepts_json() -> None:
    parser = build_parser()
    for argv in (["properties"], ["publish"], ["publish", "a", "b", "--force"], ["tables"]):
        assert parser.parse_args(["iceberg", *argv, "--json"]).json is True
    args = parser.parse_args(["iceberg", "publish", "a.b", "c", "--force"])
    assert (args.tables, args.force) == (["a.b", "c"], True)


def test_iceberg_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["iceberg"])
    assert exited.value.code == 2
    assert "properties" in capsys.readouterr().err


def test_properties_json_is_exactly_load_catalogs_properties() -> None:
    settings = FirnSettings(
        database_url=SecretStr("postgresql://firn:p%40ss@db.example:5433/lake"),
        database_schema="firn",
        warehouse="/data/warehouse",
        iceberg_catalog="lake",
    )
    output = iceberg.show_properties(argparse.Namespace(json=True), settings)
    assert output.data == catalog_properties(settings)
    assert set(output.data) == {"type", "uri", "warehouse", "init_catalog_tables"}
    text = output.plain()
    assert "Iceberg catalog 'lake'" in text
    assert "p%40ss" not in text
    assert "firn:***@db.example:5433" in text
    assert "password is hidden" in text
    example = [line for line in text.splitlines() if "load_catalog" in line]
    assert example[-1].strip().startswith("load_catalog('lake', **props)")
    assert len(text.splitlines()[-3:]) == 3


def test_a_uri_without_a_password_is_shown_as_it_is() -> None:
    uri = "postgresql+psycopg2://firn@localhost:5432/firn?options=-csearch_path%3Dfirn"
    assert iceberg._hide_password(uri) == uri


def _published(**fields: Any) -> dict[str, Any]:
    return {
        **iceberg.failure("sales.orders", ""),
        "outcome": "published",
        "identifier": "sales.orders",
        "firn_snapshot": 6,
        "iceberg_snapshot": 1234,
        "sequence_number": 2,
        "metadata_location": "file:///m.json",
        "partitions_rewritten": 2,
        "bytes_written": 12800,
        "lag_seconds": 0.5,
        **fields,
    }


def test_publish_prints_a_row_per_table() -> None:
    results = [
        _published(),
        {**iceberg.failure("t", ""), "outcome": "unchanged", "identifier": "default.t",
         "firn_snapshot": 3},
        iceberg.failure("broken", "OSError: disk full"),
        _published(table="moved", changed_outside=True, removed_files=4),
    ]  # fmt: skip
    lines = str(iceberg.publish_text(results)).splitlines()
    assert lines[0].split() == [
        "TABLE", "OUTCOME", "ICEBERG", "FIRN", "SNAPSHOT", "ICEBERG", "SNAPSHOT", "LAG",
        "WRITTEN", "NOTE",
    ]  # fmt: skip
    assert lines[1].split()[:8] == [
        "sales.orders", "published", "sales.orders", "6", "1234", "0.5s", "12.5", "KiB",
    ]  # fmt: skip
    assert lines[2].split()[:5] == ["t", "unchanged", "default.t", "3", "-"]
    assert lines[3].split()[:4] == ["broken", "failed", "-", "-"]
    assert lines[3].endswith("OSError: disk full")
    assert "changed outside Firn" in lines[4]
    assert "4 expired file(s) removed" in lines[4]
    assert "nothing to publish" in str(iceberg.publish_text([]))


def test_a_failure_has_the_keys_of_a_publication() -> None:
    from firn.iceberg.publisher import Publication

    assert set(iceberg.failure("t", "x")) == set(Publication("t", "refused").as_dict())


def test_tables_shows_identifier_metadata_and_lag() -> None:
    rows = [
        iceberg.table_entry(publication()),
        iceberg.table_entry(
            publication(
                table="orders",
                identifier=None,
                published_at=None,
                firn_snapshot=None,
                metadata_location=None,
                lag_seconds=None,
                waiting_snapshots=2,
                behind_seconds=30.0,
            )
        ),
        iceberg.table_entry(publication(table="a..b", identifier=None, published_at=None)),
        iceberg.table_entry(publication(table="x", last_error="boom")),
    ]
    # Never published: the identifier it will get (here the default namespace's).
    assert rows[1]["identifier"] in ("orders", "default.orders")
    assert rows[2]["identifier"] is None  # no identifier: the publisher refuses it
    text = iceberg.tables_text(rows)
    assert isinstance(text, list)
    lines = str(text[0]).splitlines()
    assert lines[1].split()[:4] == ["sales.orders", "sales.orders", "current", "6"]
    assert "2026-01-01 00:00:00+00:00" in lines[1]
    assert lines[1].endswith("00001-a.metadata.json")
    assert "never" in lines[2]  # waiting, but never published
    assert "  x: last publication failed: boom" in text
    assert iceberg.tables_text([]) == "no tables"


# --- the dashboard


def lag(seconds: int, value: float, table: str = "sales.orders") -> LagPoint:
    return LagPoint(table, T0 + dt.timedelta(seconds=seconds), value, seconds)


def test_the_lag_chart_draws_a_dot_per_publication() -> None:
    html = lag_chart("Lag <1h>", [lag(0, 1.0), lag(60, 4.0), lag(120, 2.0, "<b>")], tables=True)
    assert html.count('class="dot"') == 3
    assert "Lag &lt;1h&gt;" in html
    assert "&lt;b&gt;: lag 2.0 s" in html
    assert "<b>" not in html
    assert "max 4 s" in html
    one = lag_chart("Lag", [lag(0, 1.0)])
    assert one.count('class="dot"') == 1
    assert "sales.orders" not in one  # without tables=True the tooltip has no table
    assert "no publications" in lag_chart("Lag", [])


def test_the_partitions_table_shows_publication_freshness() -> None:
    html = pages.partitions_table([status(publication())])
    assert "<th>Iceberg</th>" in html
    assert '<td class="published">lag 1.2s</td>' in html
    failed = pages.partitions_table([status(publication(last_error="<oops>"))])
    assert '<td class="published error" title="&lt;oops&gt;">error</td>' in failed
    old = status(None)
    del old["publication"]
    assert '<td class="published">-</td>' in pages.partitions_table([old])


def test_the_table_page_shows_the_identifier_and_metadata_location() -> None:
    chart = lag_chart("Iceberg publication lag", [lag(0, 1.0), lag(60, 2.0)])
    html = pages.table_page(status(publication()), [], [chart], action_enabled=False)
    assert '<table id="publication">' in html
    assert '<td class="identifier">sales.orders</td>' in html
    assert "00001-a.metadata.json</td>" in html
    assert '<td class="freshness">lag 1.2s</td>' in html
    assert html.count('class="dot"') == 2
    off = pages.table_page(status(publication(publish=False)), [], [], action_enabled=False)
    assert "iceberg.publish is false" in off


def test_the_overview_shows_the_publication_charts() -> None:
    chart = lag_chart("every table", [lag(0, 1.0)], tables=True)
    html = pages.overview_page([status(publication())], [], [chart])
    assert "<h2>Iceberg publication</h2>" in html
    assert 'class="dot"' in html
    assert "Iceberg publication" not in pages.overview_page([], [], [chart])
