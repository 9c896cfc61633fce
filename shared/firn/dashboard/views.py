"""Each dashboard page read from the catalog and rendered: what a GET shows."""

from __future__ import annotations

from firn.api.catalog import Catalog
from firn.catalog.fleet import fleet_status
from firn.catalog.history import recent_plans, schema_history, snapshot_bytes
from firn.catalog.listing import list_tasks
from firn.catalog.progress import commit_points, merge_points
from firn.catalog.publication import LAG_WINDOW, publication_lags
from firn.dashboard import pages
from firn.dashboard.charts import backlog_series, lag_chart, latency_series, line_chart
from firn.errors import ConfigError

RECENT_TASKS = 30
RECENT_PLANS = 20
CHART_POINTS = 500
"""At most this many of the newest points per chart."""
LAG_TITLE = f"Iceberg publication lag, last {LAG_WINDOW / 3600:g} h (s)"


class PageNotFound(Exception):
    """The page names something the catalog does not have (HTTP 404)."""


OVERVIEW_TABLES = 50
"""Most tables whose partitions the overview lists (those owing the most, by
``fleet_status``): each is a ``Table.status()``, and a fleet of thousands would make
the page thousands of catalog reads."""


def overview(catalog: Catalog) -> str:
    fleet = fleet_status(catalog.conn, top=OVERVIEW_TABLES)
    names = catalog.tables()
    shown = names if len(names) <= OVERVIEW_TABLES else [d.table for d in fleet.debts]
    statuses = [catalog.table(name).status() for name in shown]
    tasks = list_tasks(catalog.conn, limit=RECENT_TASKS)
    lags = publication_lags(catalog.conn)[-CHART_POINTS:]
    charts = [lag_chart(LAG_TITLE + ", every table", lags, tables=True)]
    return pages.overview_page(statuses, tasks, charts, fleet, hidden=len(names) - len(shown))


def table_view(catalog: Catalog, name: str, *, action_enabled: bool, login: bool = False) -> str:
    try:
        table = catalog.table(name)
    except ConfigError as exc:
        raise PageNotFound(str(exc)) from exc
    conn, table_id = catalog.conn, table.table_id
    status = table.status()
    plans = recent_plans(conn, table_id, RECENT_PLANS)
    commits, merges = commit_points(conn, table_id), merge_points(conn, table_id)
    backlog = backlog_series(commits, merges)
    latency = latency_series(commits, merges)
    written = snapshot_bytes(conn, table_id, CHART_POINTS)
    amplification = [(s.at, a) for s in written if (a := s.amplification) is not None]
    charts = [
        line_chart("Backlog: commits not yet merged", backlog[-CHART_POINTS:]),
        line_chart("Latency: longest wait until compacted", latency[-CHART_POINTS:], " s"),
        line_chart("Write amplification (written / committed)", amplification, "x"),
        lag_chart(LAG_TITLE, publication_lags(conn, table_id)[-CHART_POINTS:]),
    ]
    schema = schema_history(conn, table_id)
    return pages.table_page(
        status, plans, charts, action_enabled=action_enabled, login=login, schema=schema
    )
