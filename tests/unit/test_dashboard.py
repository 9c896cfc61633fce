"""The web dashboard without a server or a database: its charts, its HTML, and its
routes, token check and catalog handling over a fake catalog."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pydantic import SecretStr

from firn.catalog.fleet import FleetStatus, TableDebt, WaitingPartition
from firn.catalog.history import (
    PlanHistory,
    SchemaHistory,
    Transition,
    describe_columns,
    schema_history,
)
from firn.catalog.progress import CommitPoint, MergePoint
from firn.commands.output import Output
from firn.dashboard import Dashboard, pages
from firn.dashboard.charts import backlog_series, latency_series, line_chart
from firn.errors import ConfigError, ServiceError
from firn.model.evolution import SchemaChange
from firn.model.schema import TableSchema
from firn.settings import FirnSettings

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def partition(key: str, score: float, files: int, **extra: Any) -> dict[str, Any]:
    return {
        "partition": key,
        "max_merged_seq": 0,
        "max_seq": 3,
        "unmerged_files": files,
        "unmerged_bytes": files * 2048,
        "max_runs_per_node": files // 2,
        "score": score,
        "due": "major" if score else None,
        "reasons": [],
        "open_plan": None,
        "last_compaction": None,
        **extra,
    }


def status(name: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"table": name, "seq": 3, "snapshot": 4, "partitions": list(parts)}


# --- charts


def test_backlog_counts_commits_until_a_merge_covers_them() -> None:
    commits = [CommitPoint("a", 1, at(1)), CommitPoint("a", 2, at(2)), CommitPoint("b", 1, at(3))]
    merges = [MergePoint("a", 9, 2, at(4)), MergePoint("b", 10, 1, at(5))]
    late = [CommitPoint("a", 3, at(6))]
    series = backlog_series(commits + late, merges)
    assert [v for _, v in series] == [1, 2, 3, 1, 0, 1]
    assert [t for t, _ in series] == [at(s) for s in range(1, 7)]


def test_a_merge_at_the_same_instant_counts_after_the_commit() -> None:
    series = backlog_series([CommitPoint("a", 1, at(1))], [MergePoint("a", 2, 1, at(1))])
    assert [v for _, v in series] == [1, 0]


def test_latency_is_the_longest_wait_of_the_commits_each_merge_folds_in() -> None:
    commits = [
        CommitPoint("a", 1, at(0)),
        CommitPoint("a", 2, at(5)),
        CommitPoint("b", 1, at(2)),
        CommitPoint("a", 3, at(20)),  # never merged: left out
    ]
    merges = [MergePoint("a", 7, 2, at(10)), MergePoint("b", 8, 1, at(12))]
    assert latency_series(commits, merges) == [(at(10), 10.0), (at(12), 10.0)]
    later = [*merges, MergePoint("a", 9, 3, at(50))]
    assert latency_series(commits, later)[-1] == (at(50), 30.0)


def test_a_chart_needs_two_points_and_escapes_its_title() -> None:
    assert "not enough history" in line_chart("<b>", [(at(0), 1.0)])
    svg = line_chart("<b>", [(at(0), 0.0), (at(10), 4.0), (at(20), 2.0)])
    assert "&lt;b&gt;" in svg
    assert "<b>" not in svg
    points = svg.split('points="')[1].split('"')[0].split()
    assert len(points) == 3
    assert "max 4" in svg


# --- pages


def test_partitions_come_highest_score_first_across_tables() -> None:
    html = pages.partitions_table(
        [
            status("a", partition("region=eu", 1.5, 4)),
            status("b", partition("", 7.25, 12), partition("k=1", 0.0, 0)),
        ]
    )
    order = [html.index(f'data-partition="{p}"') for p in ("", "region=eu", "k=1")]
    assert order == sorted(order)
    assert '<td class="num score">7.25</td>' in html
    assert '<td class="num unmerged-files">12</td>' in html
    assert '<td class="num read-amplification">6</td>' in html
    assert "(all)" in html  # the unpartitioned table's partition


def test_catalog_values_are_escaped() -> None:
    html = pages.overview_page([status("<script>x</script>", partition("k=<i>", 1.0, 1))], [])
    assert "<script>x" not in html
    assert "&lt;script&gt;" in html
    assert "k=<i>" not in html
    assert "/table?name=%3Cscript%3Ex%3C%2Fscript%3E" in html


def test_the_action_form_only_when_enabled() -> None:
    page = pages.table_page(status("t", partition("k=1", 1.0, 2)), [], [], action_enabled=False)
    assert 'id="action-disabled"' in page
    assert "<form" not in page
    page = pages.table_page(status("t", partition("k=1", 1.0, 2)), [], [], action_enabled=True)
    assert '<form method="post" action="/compact"' in page
    assert 'name="token"' in page
    assert '<option value="k=1">' in page


def test_a_plan_shows_its_transitions_and_tasks() -> None:
    moves = (
        Transition("", "Planned", 0, "", at(1)),
        Transition("Planned", "Executing", 0, "claimed", at(2)),
    )
    plan = PlanHistory(7, "k=1", "major", "Executing", 2.0, 5, at(1), at(2), "boom", moves)
    html = pages.plans_table([plan])
    assert "Planned</span> → <span" in html
    assert "→ <span" in html
    assert html.count("→") == 1  # no arrow from the empty state of creation
    assert 'data-plan="7"' in html
    assert '<div class="error">boom</div>' in html


def orders_schema() -> TableSchema:
    schema = pa.schema(
        [
            pa.field("region", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("note", pa.string()),
        ]
    )
    return TableSchema.build("orders", schema, ["region", "id"], ["region"])


def evolved() -> TableSchema:
    """``orders_schema`` after one change: a column with a default and a doc, a rename."""
    change = SchemaChange(orders_schema())
    change.add_column("discount", pa.decimal128(12, 2), Decimal("0.5"), "<b>in EUR</b>")
    change.rename_column("note", "comment")
    return change.apply()


def schema_rows(*definitions: TableSchema) -> list[tuple[Any, ...]]:
    """What ``schema_history``'s query returns for these versions."""
    changes = [[], ["add discount decimal128(12, 2)", "rename note -> <comment>"]]
    return [
        (d.schema_id, 3 * d.schema_id, at(d.schema_id), changes[d.schema_id], d.to_ipc(),
         list(d.primary_key), list(d.partition_by))
        for d in definitions
    ]  # fmt: skip


def test_the_schema_section_shows_the_columns_and_every_version() -> None:
    versions = schema_history(FakeConn(rows=schema_rows(orders_schema(), evolved())), 1)
    assert [v.schema_id for v in versions] == [0, 1]
    html = pages.table_page(
        status("orders", partition("region=eu", 1.0, 2)), [], [], action_enabled=False,
        schema=versions,
    )  # fmt: skip
    section = html[html.index("<h2>Schema</h2>") :]
    columns = section[: section.index("</table>")]
    names = [c.split('"')[1] for c in columns.split("data-column=")[1:]]
    assert names == ["region", "id", "comment", "discount"]
    assert '<td class="num field-id">4</td><td class="column-name">discount</td>' in columns
    assert '<td class="column-type">decimal128(12, 2)</td>' in columns
    assert '<td class="default">0.50</td>' in columns
    assert '<td class="doc">&lt;b&gt;in EUR&lt;/b&gt;</td>' in columns  # user data, escaped
    assert "<td>key, partition</td>" in columns
    assert '<td class="required">yes</td>' in columns
    history = section[section.index('id="schema-versions"') :]
    assert history.index('data-schema="1"') < history.index('data-schema="0"')  # newest first
    assert "add discount decimal128(12, 2)<br>rename note -&gt; &lt;comment&gt;" in history
    assert "as created" in history
    assert "Version 1, since snapshot 3." in section


def test_a_string_default_is_quoted_and_no_default_is_a_dash() -> None:
    change = SchemaChange(orders_schema())
    change.add_column("label", pa.string(), "")
    (version,) = [SchemaHistory(1, 4, None, ("add label string",), describe_columns(
        change.apply().schema, ("region", "id"), ("region",)))]  # fmt: skip
    html = pages.schema_section([version])
    assert '<tr data-column="label">' in html
    assert '<td class="default">&quot;&quot;</td>' in html
    assert '<td class="default">-</td>' in html
    assert pages.schema_section([]).endswith("No schema versions recorded.</p>")


def _fleet(debts: list[TableDebt], oldest: WaitingPartition | None) -> FleetStatus:
    return FleetStatus(
        tables=1000,
        partitions=4000,
        partitions_unmerged=3600,
        partitions_due=40,
        tables_due=12,
        open_plans=9,
        tasks={"Executing": 2, "Pending": 7},
        oldest_due=oldest,
        debts=debts,
    )


def test_the_fleet_at_a_glance() -> None:
    debts = [TableDebt(f"t{i}", 4, 4 - i % 4, 9 * i, 2048 * i, 12.0 * i, i % 2) for i in range(30)]
    oldest = WaitingPartition("<b>busy</b>", "region=eu", "minor", 125.0)
    html = pages.fleet_section(_fleet(debts, oldest))
    assert '<td class="tables">1000</td>' in html
    assert '<td class="due">40 (1.0%) of 12 tables</td>' in html
    assert '<td class="open-plans">9 (tasks: Executing 2, Pending 7)</td>' in html
    assert "&lt;b&gt;busy&lt;/b&gt; region=eu, minor due, oldest change 2m05s ago" in html
    # The tables owing the most, as many as FLEET_DEBTS, in the order given.
    rows = [html.index(f'<tr data-table="t{i}">') for i in range(pages.FLEET_DEBTS)]
    assert rows == sorted(rows)
    assert '<tr data-table="t20">' not in html
    assert '<td class="num unmerged-bytes" title="4096 bytes">4.0 KiB</td>' in html
    assert '<td class="waiting-longest">none due</td>' in pages.fleet_section(_fleet([], None))
    assert 'id="debts"' not in pages.fleet_section(_fleet([], None))


def test_an_overview_of_a_large_fleet_says_what_it_leaves_out() -> None:
    html = pages.overview_page(
        [status("a", partition("k=1", 1.0, 1))], [], (), _fleet([], None), 999
    )
    assert html.index('id="fleet"') < html.index('id="partitions"')
    assert "999 other tables are not" in html
    assert "No tables yet." not in pages.overview_page([], [], (), _fleet([], None), 1000)
    assert 'id="partitions-hidden"' not in pages.overview_page([status("a")], [])


def test_overview_without_tables_and_the_dead_letter_note() -> None:
    html = pages.overview_page([], [])
    assert "No tables yet." in html
    assert "No tasks yet." in html
    assert "firn.dlq" in html


# --- the dashboard over a fake catalog


class FakeConn:
    def __init__(self, fail: bool = False, rows: list[tuple[Any, ...]] | None = None) -> None:
        self.fail = fail
        self.statements: list[tuple[str, Any]] = []
        self.schema_rows = rows or []
        """What a query of ``table_schema`` returns (every other query: nothing)."""

    def execute(self, query: str, params: Any = None) -> FakeConn:
        if self.fail:
            raise ServiceError("server closed the connection unexpectedly")
        self.statements.append((query, params))
        return self

    def fetchall(self) -> list[Any]:
        query = self.statements[-1][0] if self.statements else ""
        return list(self.schema_rows) if "FROM table_schema" in query else []

    def fetchone(self) -> Any:
        return None


class FakeTable:
    def __init__(self, name: str) -> None:
        self.name = name
        self.table_id = 1

    def status(self) -> dict[str, Any]:
        return status(self.name, partition("k=1", 3.5, 8))


class FakeCatalog:
    def __init__(self, conn: FakeConn) -> None:
        self.conn = conn
        self.closed = False

    def tables(self) -> list[str]:
        return ["orders"]

    def table(self, name: str) -> FakeTable:
        if name != "orders":
            raise ConfigError(f"no table named {name!r}")
        return FakeTable(name)

    def close(self) -> None:
        self.closed = True


class Opener:
    """Hands out the prepared catalogs one per open; raises when told to."""

    def __init__(self, *results: FakeCatalog | Exception) -> None:
        self.results = list(results)
        self.opened = 0

    def __call__(self) -> Any:
        self.opened += 1
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def dashboard(
    opener: Opener, token: str | None = None, request: Requests | None = None
) -> Dashboard:
    settings = FirnSettings(
        dashboard_token=None if token is None else SecretStr(token), dashboard_timeout=2.5
    )
    return Dashboard(settings, open_catalog=opener, request=request or Requests())


def test_a_page_reads_under_the_statement_timeout() -> None:
    conn = FakeConn()
    response = dashboard(Opener(FakeCatalog(conn))).get("/")
    assert response.status == 200
    assert '<td class="num score">3.5</td>' in response.html
    assert ("SELECT set_config('statement_timeout', %s, false)", ("2500",)) in conn.statements


def test_postgres_down_is_a_503_and_the_next_request_recovers() -> None:
    broken = FakeCatalog(FakeConn(fail=True))
    opener = Opener(
        ServiceError("cannot connect to Postgres: refused"), broken, FakeCatalog(FakeConn())
    )
    board = dashboard(opener)
    first = board.get("/")
    assert first.status == 503
    assert "cannot connect to Postgres: refused" in first.html
    second = board.get("/")
    assert second.status == 503
    assert "server closed the connection" in second.html
    assert broken.closed
    assert board.get("/").status == 200
    assert opener.opened == 3


def test_a_bug_in_a_page_is_a_500_and_the_server_serves_on() -> None:
    class Buggy(FakeCatalog):
        def tables(self) -> list[str]:
            raise ValueError("a bug")

    board = dashboard(Opener(Buggy(FakeConn()), FakeCatalog(FakeConn())))
    failed = board.get("/")
    assert failed.status == 500
    assert "ValueError: a bug" in failed.html
    assert board.get("/").status == 200


def test_the_table_page_reads_the_schema_versions() -> None:
    conn = FakeConn(rows=schema_rows(orders_schema(), evolved()))
    response = dashboard(Opener(FakeCatalog(conn))).get("/table?name=orders")
    assert response.status == 200, response.html
    assert '<table id="schema-columns">' in response.html
    assert '<tr data-column="discount">' in response.html
    assert '<tr data-schema="1">' in response.html
    queries = [q for q, params in conn.statements if "FROM table_schema" in q]
    assert len(queries) == 1


def test_unknown_pages_and_tables_are_404() -> None:
    board = dashboard(Opener(FakeCatalog(FakeConn())))
    assert board.get("/nothing").status == 404
    missing = board.get("/table?name=nope")
    assert missing.status == 404
    assert "no table named" in missing.html


class Requests:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str]] = []

    def __call__(self, settings: FirnSettings, table: Any, part: str | None, kind: str) -> Output:
        self.calls.append((table.name, part, kind))
        return Output({}, f"requested {kind} compaction of {table.name}")


def test_the_action_is_disabled_without_a_token_setting() -> None:
    requests = Requests()
    board = dashboard(Opener(FakeCatalog(FakeConn())), request=requests)
    response = board.post("/compact", {"table": "orders", "token": "anything"})
    assert response.status == 403
    assert "disabled" in response.html
    assert requests.calls == []


def test_the_action_needs_the_right_token() -> None:
    requests = Requests()
    board = dashboard(Opener(FakeCatalog(FakeConn())), token="t0k", request=requests)
    form = {"table": "orders", "partition": "k=1", "kind": "minor"}
    assert board.post("/compact", form).status == 403
    assert board.post("/compact", {**form, "token": "t0K"}).status == 403
    assert board.post("/compact", form, authorization="Bearer nope").status == 403
    assert requests.calls == []
    done = board.post("/compact", {**form, "token": "t0k"})
    assert done.status == 200
    assert "requested minor compaction of orders" in done.html
    by_header = board.post("/compact", {**form, "partition": ""}, authorization="Bearer t0k")
    assert by_header.status == 200
    assert requests.calls == [("orders", "k=1", "minor"), ("orders", None, "minor")]


def test_the_action_rejects_bad_forms() -> None:
    board = dashboard(Opener(FakeCatalog(FakeConn())), token="t", request=Requests())
    assert board.post("/compact", {"table": "orders", "kind": "huge", "token": "t"}).status == 400
    assert board.post("/compact", {"table": "nope", "token": "t"}).status == 404
    assert board.post("/other", {"token": "t"}).status == 404
