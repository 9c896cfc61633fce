"""The web dashboard in a real browser: Debian's headless Chromium, driven by
Selenium through Debian's chromedriver (nothing downloads a browser or a driver),
against the real catalog and Kafka. The numbers on the page are the catalog's
(``Table.status()``), the compaction request is refused without the token and
published with it, and the table page is saved as a screenshot: in the test's temporary
directory, or where ``FIRN_DASHBOARD_SCREENSHOT`` says (``docs/dashboard.png`` renews the
monitoring guide's).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pydantic import SecretStr
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

import firn
from firn.catalog.fleet import fleet_status
from firn.commands.compact import request_compaction
from firn.dashboard import DashboardServer, serve
from firn.events.plans import PlanRequestEvent
from firn.iceberg.publisher import Publisher
from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from tests.integration.cdc_workload import wait_until_settled
from tests.integration.service_processes import running_services
from tests.integration.test_cli_commands import read_requests
from tests.integration.test_demo_alone import firn_demo, summary

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TOKEN = "s3cret-for-the-browser-test"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)
SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
    ]
)


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebDriver]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"the dashboard's browser test needs {' and '.join(missing)}: "
            "apt-get install chromium chromium-driver (.ci/run installs them)"
        )
    # Both paths are given, so Selenium Manager has nothing to find; offline, it
    # could not download anything even if it ran.
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    # A lookup right after a click waits for the next page (up to this long).
    driver.implicitly_wait(15)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def dashboard_settings(settings: FirnSettings, tmp_path: Path) -> FirnSettings:
    return settings.model_copy(
        update={
            "warehouse": str(tmp_path / "warehouse"),
            "dashboard_host": "127.0.0.1",
            "dashboard_token": SecretStr(TOKEN),
        }
    )


@pytest.fixture
def orders(dashboard_settings: FirnSettings) -> Iterator[firn.Table]:
    """Commits to two partitions, two major compactions of one, commits after them,
    and a schema change."""
    with firn.connect(settings=dashboard_settings) as catalog:
        table = catalog.create_table(
            "shop.orders", SCHEMA, ["region", "id"], ["region"], {"base.buckets": 2}
        )
        for tag in range(3):
            table.commit(_rows("eu", range(40), tag))
            table.commit(_rows("us", range(25), tag))
        firn.compact(table, "region=eu", engine="local")
        table.commit(_rows("eu", range(20), 7))
        firn.compact(table, "region=eu", engine="local")
        table.commit(_rows("eu", range(10), 9))
        for tag in range(4):
            table.commit(_rows("us", range(30), 10 + tag))
        with table.update_schema() as u:
            u.add_column("channel", pa.string(), default="web", doc="where it was ordered")
        yield table


@pytest.fixture
def server(dashboard_settings: FirnSettings) -> Iterator[DashboardServer]:
    running = serve(dashboard_settings, request_compaction, port=0)
    try:
        yield running
    finally:
        running.stop()


def _rows(region: str, ids: range, tag: int) -> pa.Table:
    return pa.table(
        {
            "region": [region] * len(ids),
            "id": list(ids),
            "amount": [float(tag * 1000 + i) for i in ids],
            "_op": ["U"] * len(ids),
        }
    )


def _cell(driver: WebDriver, table: str, partition: str, column: str) -> str:
    row = driver.find_element(
        By.CSS_SELECTOR, f'#partitions tr[data-table="{table}"][data-partition="{partition}"]'
    )
    return str(row.find_element(By.CSS_SELECTOR, f"td.{column}").text)


def _post(url: str, form: dict[str, str]) -> int:
    data = urllib.parse.urlencode(form).encode()
    try:
        with urllib.request.urlopen(url, data=data, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


def test_the_page_shows_the_catalogs_numbers_and_guards_the_action(
    browser: WebDriver,
    orders: firn.Table,
    server: DashboardServer,
    dashboard_settings: FirnSettings,
    unique: str,
    tmp_path: Path,
) -> None:
    status = {p["partition"]: p for p in orders.status()["partitions"]}
    assert status["region=us"]["unmerged_files"] > status["region=eu"]["unmerged_files"] > 0
    # Published twice as an Iceberg table: two dots on the publication-lag charts.
    with firn.connect(settings=dashboard_settings) as catalog:
        publisher = Publisher(catalog.conn, catalog=dashboard_settings.iceberg_catalog)
        assert publisher.publish("shop.orders").outcome == "published"
        published = publisher.publish("shop.orders", force=True)
        assert published.outcome == "published"

    with firn.connect(settings=dashboard_settings) as catalog:
        fleet = fleet_status(catalog.conn)
    browser.get(server.url)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Tables"
    # The fleet at a glance above the partitions, as firn status --fleet counts it.
    assert browser.find_element(By.CSS_SELECTOR, "#fleet td.tables").text == str(fleet.tables)
    debt = browser.find_element(By.CSS_SELECTOR, '#debts tr[data-table="shop.orders"]')
    assert debt.find_element(By.CSS_SELECTOR, "td.unmerged-files").text == str(
        sum(p["unmerged_files"] for p in status.values())
    )
    assert _cell(browser, "shop.orders", "region=eu", "published").startswith("lag ")
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure.publication-lag circle.dot")) == 2
    for key, partition in status.items():
        assert _cell(browser, "shop.orders", key, "score") == f"{partition['score']:g}"
        assert _cell(browser, "shop.orders", key, "unmerged-files") == str(
            partition["unmerged_files"]
        )
        assert _cell(browser, "shop.orders", key, "read-amplification") == str(
            partition["max_runs_per_node"]
        )
    shown = [
        row.get_attribute("data-partition")
        for row in browser.find_elements(By.CSS_SELECTOR, "#partitions tr[data-partition]")
    ]
    assert shown == sorted(status, key=lambda k: -status[k]["score"])
    eu_last = _cell(browser, "shop.orders", "region=eu", "last-compaction")
    assert eu_last.startswith(f"plan {status['region=eu']['last_compaction']['plan_id']} major")
    assert _cell(browser, "shop.orders", "region=us", "last-compaction") == "never"

    browser.find_element(By.LINK_TEXT, "shop.orders").click()
    WebDriverWait(browser, 15).until(lambda d: d.title.startswith("Table shop.orders"))
    plan = browser.find_element(By.CSS_SELECTOR, "#plans tr[data-plan]")
    assert plan.find_element(By.CSS_SELECTOR, "td.plan-state").text == "Committed"
    assert "Committed" in plan.find_element(By.CSS_SELECTOR, ".history").text
    # Backlog, latency and write amplification, each with enough history to draw,
    # and the lag of each Iceberg publication as a dot.
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg polyline")) == 3
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure.publication-lag circle.dot")) == 2
    publication = browser.find_element(By.ID, "publication")
    assert publication.find_element(By.CSS_SELECTOR, "td.identifier").text == "shop.orders"
    location = publication.find_element(By.CSS_SELECTOR, "td.metadata-location").text
    assert location == published.metadata_location
    # The schema: every column with its field id, the added one with its default and
    # doc; the versions newest first.
    columns = browser.find_elements(By.CSS_SELECTOR, "#schema-columns tr[data-column]")
    assert [c.get_attribute("data-column") for c in columns] == [*SCHEMA.names, "channel"]
    added = browser.find_element(By.CSS_SELECTOR, '#schema-columns tr[data-column="channel"]')
    assert added.find_element(By.CSS_SELECTOR, "td.field-id").text == str(len(SCHEMA) + 1)
    assert "web" in added.find_element(By.CSS_SELECTOR, "td.default").text
    assert added.find_element(By.CSS_SELECTOR, "td.doc").text == "where it was ordered"
    versions = browser.find_elements(By.CSS_SELECTOR, "#schema-versions tr[data-schema]")
    assert [v.get_attribute("data-schema") for v in versions] == ["1", "0"]
    assert "add channel string" in versions[0].text
    screenshot = Path(os.environ.get("FIRN_DASHBOARD_SCREENSHOT", tmp_path / "dashboard.png"))
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 0

    # The action: refused without the token and with a wrong one, done with it.
    action = server.url + "compact"
    request = {"table": "shop.orders", "partition": "region=us", "kind": "major"}
    assert _post(action, request) == 403
    assert _post(action, {**request, "token": "wrong"}) == 403
    Select(browser.find_element(By.NAME, "partition")).select_by_value("region=us")
    browser.find_element(By.CSS_SELECTOR, "#compact button").click()
    assert "missing or wrong token" in browser.find_element(By.ID, "error").text

    browser.back()
    Select(browser.find_element(By.NAME, "partition")).select_by_value("region=us")
    browser.find_element(By.CSS_SELECTOR, "#compact input[name=token]").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#compact button").click()
    result = browser.find_element(By.ID, "action-result").text
    assert result.startswith("requested major compaction of shop.orders")
    # Exactly one request on the topic: the refused ones published nothing.
    ((key, event),) = read_requests(dashboard_settings, f"dash-{unique}", expect=1)
    request_event = PlanRequestEvent.model_validate(event)
    assert key == "shop.orders/region=us"
    assert (request_event.partition_key, request_event.max_seq) == (
        "region=us",
        status["region=us"]["max_seq"],
    )


def test_with_the_services_and_the_demo_producer_the_page_follows_the_stack(
    browser: WebDriver, stack_settings: FirnSettings, tmp_path: Path
) -> None:
    """What a new user sees with `make demo`: the four services and the demo producer
    (`firn demo`, as docker-compose runs it), the page opened while it produces, and
    once the stack has settled, every partition's numbers equal to the catalog's."""
    settings = stack_settings
    ensure_topics(settings, Topics.from_settings(settings).all())
    with running_services(
        settings,
        tmp_path,
        ["metrics", "planner", "dispatcher", "committer"],
        FIRN_METRICS_CHECK_INTERVAL="5",
    ) as services:
        demo = firn_demo(settings, "--duration", "12")
        server = serve(settings, request_compaction, port=0)
        try:
            browser.get(server.url)

            def demo_rows(driver: WebDriver) -> list[Any]:
                driver.refresh()
                return list(
                    driver.find_elements(
                        By.CSS_SELECTOR, '#partitions tr[data-table="demo.orders"]'
                    )
                )

            # While it produces, the demo table and its partitions appear.
            assert WebDriverWait(browser, 60, poll_frequency=1).until(demo_rows)
            stdout, stderr = demo.communicate(timeout=180)
            assert demo.returncode == 0, stderr
            assert summary(stdout)["ok"] is True  # the table equals the producer's model
            with firn.connect(settings=settings) as catalog:
                table = catalog.table("demo.orders")
                wait_until_settled(table, services, timeout=300)
                status = {p["partition"]: p for p in table.status()["partitions"]}
                browser.get(server.url)
                assert len(demo_rows(browser)) == len(status) == 4
                for key, partition in status.items():
                    assert _cell(browser, "demo.orders", key, "score") == f"{partition['score']:g}"
                    assert _cell(browser, "demo.orders", key, "unmerged-files") == str(
                        partition["unmerged_files"]
                    )
                    last = partition["last_compaction"]
                    assert last is not None, "the services compacted every partition"
                    assert _cell(browser, "demo.orders", key, "last-compaction").startswith(
                        f"plan {last['plan_id']} {last['kind']}"
                    )
                # The tasks the services planned are listed, none left open: each
                # committed, or replaced before it ran by a newer plan of its partition
                # (the demo folds at every cycle, so a waiting plan is often outdated).
                states = {
                    row.find_elements(By.TAG_NAME, "td")[4].text
                    for row in browser.find_elements(By.CSS_SELECTOR, "#tasks tr")[1:]
                }
                assert "Committed" in states
                assert states <= {"Committed", "Replaced"}, states
        finally:
            server.stop()
            if demo.poll() is None:
                demo.kill()
