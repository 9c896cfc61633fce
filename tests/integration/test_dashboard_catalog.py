"""The dashboard over HTTP when the real catalog misbehaves: a reading stuck behind a
lock is cut off by the statement timeout and answered with 503, a connection killed
under it is answered with 503; either way the server keeps serving and the next
request has the page again."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import firn
from firn.commands.compact import request_compaction
from firn.dashboard import DashboardServer, serve
from firn.postgres import connect
from firn.settings import FirnSettings

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture
def dashboard_settings(settings: FirnSettings, tmp_path: Path, unique: str) -> FirnSettings:
    return settings.model_copy(
        update={
            "warehouse": str(tmp_path / "warehouse"),
            "dashboard_host": "127.0.0.1",
            "dashboard_timeout": 1.0,
            "application_name": f"dash-{unique}",
        }
    )


@pytest.fixture
def server(dashboard_settings: FirnSettings) -> Iterator[DashboardServer]:
    setup = dashboard_settings.model_copy(update={"application_name": "setup"})
    with firn.connect(settings=setup) as catalog:
        catalog.create_table("dash.events", SCHEMA, ["id"])
    running = serve(dashboard_settings, request_compaction, port=0)
    try:
        yield running
    finally:
        running.stop()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read().decode()


def test_a_catalog_slower_than_the_timeout_is_a_503_until_it_answers(
    server: DashboardServer, dashboard_settings: FirnSettings
) -> None:
    assert _get(server.url)[0] == 200  # the catalog is open before the lock
    locker = connect(dashboard_settings.model_copy(update={"application_name": "locker"}))
    try:
        with locker.transaction():
            locker.execute("LOCK TABLE catalog_table IN ACCESS EXCLUSIVE MODE")
            code, page = _get(server.url)
            assert code == 503
            assert "statement timeout" in page
    finally:
        locker.close()
    code, page = _get(server.url)
    assert code == 200
    assert "dash.events" in page


def test_a_killed_connection_is_a_503_and_the_next_request_reconnects(
    server: DashboardServer, dashboard_settings: FirnSettings
) -> None:
    assert _get(server.url)[0] == 200
    admin = connect(dashboard_settings.model_copy(update={"application_name": "admin"}))
    try:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (dashboard_settings.application_name,),
        ).fetchone()
    finally:
        admin.close()
    assert killed == (1,)
    code, page = _get(server.url)
    assert code == 503
    assert "the catalog is unavailable" in page
    code, page = _get(server.url + "table?name=dash.events")
    assert code == 200
    assert "Table dash.events" in page
