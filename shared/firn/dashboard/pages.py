"""The dashboard's pages as HTML, from plain data; pure (no I/O), so tests render
them from fakes. Every value from the catalog is escaped: table names, partition
keys and error messages are user data.

Cells that tests and scripts read carry a class (``score``, ``unmerged-files``, ...)
and rows a ``data-table`` / ``data-partition`` (a schema's: ``data-column`` and
``data-schema``), so a reader need not parse text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from firn.catalog.fleet import FleetStatus
from firn.catalog.history import PlanHistory, SchemaHistory, Transition
from firn.catalog.listing import TaskRow
from firn.readable import duration, freshness, partition_name, size

KINDS = ("major", "full", "minor", "auto")

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left;font-size:.9em}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#777}.error{color:#a00}.ok{color:#070}
svg .axis{stroke:#999}svg .line{fill:none;stroke:#1f6fb2;stroke-width:2}
svg text{font-size:10px;fill:#555}svg .dot{fill:#c0392b}
figure{display:inline-block;width:380px;vertical-align:top;margin:0 .8em 1em 0}
details{margin:.2em 0}form{margin:1em 0}
"""


def layout(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} · Firn</title><style>{_STYLE}</style></head><body>"
        f'<p><a href="/">Firn dashboard</a></p><h1>{escape(title)}</h1>{body}</body></html>'
    )


def error_page(status: int, message: str) -> str:
    """What a page shows when it cannot be made (the catalog down or slow, ...)."""
    return layout(
        f"Error {status}",
        f'<p class="error" id="error">{escape(message)}</p>'
        '<p class="muted">Reload the page to try again.</p>',
    )


def overview_page(
    statuses: Sequence[dict[str, Any]],
    tasks: Sequence[TaskRow],
    charts: Sequence[str] = (),
    fleet: FleetStatus | None = None,
    hidden: int = 0,
) -> str:
    """The fleet at a glance (``fleet``: ``firn status --fleet``'s figures), the
    partitions of ``statuses`` (every table's, or of the tables owing the most, with
    ``hidden`` tables left out), highest score first, the Iceberg publication charts
    (``charts``), and the latest tasks."""
    body = fleet_section(fleet) if fleet is not None else ""
    if not statuses:
        body += '<p class="muted">No tables yet.</p>' if not hidden else ""
    else:
        body += "<h2>Partitions</h2>" + partitions_table(statuses)
    if hidden:
        body += (
            '<p class="muted" id="partitions-hidden">Only the tables owing the most are '
            f"listed; {hidden} other tables are not (each has its own page, and "
            "<code>firn status</code> lists them all).</p>"
        )
    if (statuses or hidden) and charts:
        body += "<h2>Iceberg publication</h2>" + "".join(charts)
    body += "<h2>Recent tasks</h2>" + tasks_table(tasks) + dead_letters_note()
    return layout("Tables", body)


FLEET_DEBTS = 20
"""Tables listed under "Owing the most"."""


def fleet_section(fleet: FleetStatus) -> str:
    """``firn status --fleet`` as a page section: the counts, the partition that has
    waited longest, and the tables that owe the most."""
    oldest = fleet.oldest_due
    waited = (
        "none due"
        if oldest is None
        else f"{escape(oldest.table)} {escape(partition_name(oldest.partition))}, "
        f"{escape(oldest.due)} due, oldest change "
        f"{'?' if oldest.waiting_seconds is None else duration(oldest.waiting_seconds)} ago"
    )
    rows = [
        ("Tables", "tables", str(fleet.tables)),
        ("Partitions", "partitions", str(fleet.partitions)),
        ("With unmerged changes", "unmerged", str(fleet.partitions_unmerged)),
        (
            "Due",
            "due",
            f"{fleet.partitions_due} ({fleet.due_share:.1%}) of {fleet.tables_due} tables",
        ),
        ("Open plans", "open-plans", f"{fleet.open_plans} (tasks: {escape(fleet.tasks_text)})"),
        ("Waiting longest", "waiting-longest", waited),
    ]
    cells = "".join(
        f'<tr><th>{label}</th><td class="{css}">{value}</td></tr>' for label, css, value in rows
    )
    body = f'<h2>Fleet</h2><table id="fleet">{cells}</table>'
    if not fleet.debts:
        return body
    head = (
        "<tr><th>Table</th><th>Partitions due</th><th>With unmerged changes</th>"
        "<th>Unmerged files</th><th>Unmerged bytes</th><th>Oldest change</th>"
        "<th>Open plans</th></tr>"
    )
    lines = [
        f'<tr data-table="{escape(d.table)}">'
        f'<td><a href="{table_href(d.table)}">{escape(d.table)}</a></td>'
        f'<td class="num due">{d.partitions_due}</td>'
        f'<td class="num unmerged">{d.partitions_unmerged}</td>'
        f'<td class="num unmerged-files">{d.unmerged_files}</td>'
        f'<td class="num unmerged-bytes" title="{d.unmerged_bytes} bytes">'
        f"{size(d.unmerged_bytes)}</td>"
        f'<td class="num oldest-change">'
        f"{'-' if d.oldest_change_seconds is None else duration(d.oldest_change_seconds)}</td>"
        f'<td class="num open-plans">{d.open_plans}</td></tr>'
        for d in fleet.debts[:FLEET_DEBTS]
    ]
    return body + f'<h3>Owing the most</h3><table id="debts">{head}{"".join(lines)}</table>'


def partitions_table(statuses: Sequence[dict[str, Any]]) -> str:
    """One row per partition of ``statuses`` (``Table.status()`` results), highest
    score first across tables."""
    rows = sorted(
        ((s["table"], p) for s in statuses for p in s["partitions"]),
        key=lambda tp: (-tp[1]["score"], tp[0], tp[1]["partition"]),
    )
    empty = [s["table"] for s in statuses if not s["partitions"]]
    published = {s["table"]: s.get("publication") for s in statuses}
    head = (
        "<tr><th>Table</th><th>Partition</th><th>Score</th><th>Unmerged files</th>"
        "<th>Unmerged bytes</th><th>Read amplification (runs)</th><th>Due</th>"
        "<th>Open plan</th><th>Last compaction</th><th>Iceberg</th></tr>"
    )
    lines = [
        f'<tr data-table="{escape(name)}" data-partition="{escape(p["partition"])}">'
        f'<td><a href="{table_href(name)}">{escape(name)}</a></td>'
        f"<td>{escape(partition_name(p['partition']))}</td>"
        f'<td class="num score">{p["score"]:g}</td>'
        f'<td class="num unmerged-files">{p["unmerged_files"]}</td>'
        f'<td class="num unmerged-bytes" title="{p["unmerged_bytes"]} bytes">'
        f"{size(p['unmerged_bytes'])}</td>"
        f'<td class="num read-amplification">{p.get("max_runs_per_node", "")}</td>'
        f"<td>{escape(p['due'] or '-')}</td>"
        f"<td>{_open_plan(p['open_plan'])}</td>"
        f'<td class="last-compaction">{_last(p["last_compaction"])}</td>'
        f"{_published_cell(published[name])}</tr>"
        for name, p in rows
    ]
    note = f'<p class="muted">No data yet: {escape(", ".join(empty))}</p>' if empty else ""
    return f'<table id="partitions">{head}{"".join(lines)}</table>{note}'


def _published_cell(publication: dict[str, Any] | None) -> str:
    """How fresh the table's Iceberg publication is; its error as the tooltip."""
    error = (publication or {}).get("last_error")
    title = f' title="{escape(error)}"' if error else ""
    css = "published error" if error else "published"
    return f'<td class="{css}"{title}>{escape(freshness(publication))}</td>'


def publication_section(publication: dict[str, Any] | None) -> str:
    """The table's Iceberg publication: its identifier, metadata file, what and when."""
    head = "<h2>Published as Iceberg</h2>"
    if publication is None:
        return head + '<p class="muted">Unknown.</p>'
    if publication["state"] == "off":
        return (
            head + '<p class="muted" id="publication">Not published (iceberg.publish is false).</p>'
        )
    at = publication.get("published_at")
    rows = [
        ("Identifier", "identifier", publication.get("identifier")),
        ("Catalog", "catalog", publication.get("catalog")),
        ("Metadata location", "metadata-location", publication.get("metadata_location")),
        ("Firn snapshot", "firn-snapshot", publication.get("firn_snapshot")),
        (
            "Published at",
            "published-at",
            None if at is None else _clock(dt.datetime.fromisoformat(at)),
        ),
        ("Freshness", "freshness", freshness(publication)),
        ("Last error", "last-error", publication.get("last_error")),
    ]
    cells = "".join(
        f'<tr><th>{label}</th><td class="{css}">{_or_muted_dash(value)}</td></tr>'
        for label, css, value in rows
    )
    return f'{head}<table id="publication">{cells}</table>'


def _or_muted_dash(value: object) -> str:
    return '<span class="muted">-</span>' if value is None else escape(str(value))


def table_href(name: str) -> str:
    return "/table?name=" + quote(name, safe="")


def _open_plan(plan: dict[str, Any] | None) -> str:
    if plan is None:
        return "-"
    tasks = ", ".join(f"{state} {n}" for state, n in sorted(plan["tasks"].items()))
    return escape(f"{plan['plan_id']} {plan['kind']} {plan['state']} ({tasks or 'no tasks'})")


def _last(last: dict[str, Any] | None) -> str:
    if last is None:
        return "never"
    at = dt.datetime.fromisoformat(last["at"]).isoformat(sep=" ", timespec="seconds")
    return escape(f"plan {last['plan_id']} {last['kind']}, {at}")


def tasks_table(tasks: Sequence[TaskRow]) -> str:
    if not tasks:
        return '<p class="muted">No tasks yet.</p>'
    head = (
        "<tr><th>Table</th><th>Partition</th><th>Plan</th><th>Task</th><th>State</th>"
        "<th>Attempt</th><th>Input</th><th>Updated</th><th>Error</th></tr>"
    )
    lines = [
        f"<tr><td>{escape(t.table)}</td><td>{escape(partition_name(t.partition))}</td>"
        f"<td>{t.plan_id} {escape(t.plan_kind)} ({escape(t.plan_state)})</td>"
        f'<td class="num">{t.task_id}</td><td>{escape(t.state)}</td>'
        f'<td class="num">{t.attempt}</td><td class="num">{size(t.input_bytes)}</td>'
        f"<td>{_clock(t.updated_at)}</td><td>{escape(t.error or '')}</td></tr>"
        for t in tasks
    ]
    return f'<table id="tasks">{head}{"".join(lines)}</table>'


def dead_letters_note() -> str:
    # The catalog records no dead letters: they live on the Kafka topic alone.
    return (
        "<h2>Dead letters</h2><p>The catalog does not record dead letters: they are "
        "events on the <code>firn.dlq</code> topic (with its prefix), counted by the "
        "services' <code>firn_dead_letters_total</code> metric, by reason.</p>"
    )


def table_page(
    status: dict[str, Any],
    plans: Sequence[PlanHistory],
    charts: Sequence[str],
    *,
    action_enabled: bool,
    login: bool = False,
    schema: Sequence[SchemaHistory] = (),
) -> str:
    """One table: its partitions, charts over time, the request-a-compaction form,
    its recent plans with their tasks and state history, and its schema: the current
    columns and every version (``schema``, oldest first)."""
    name = status["table"]
    body = (
        f"<p>Seq {status['seq']}, snapshot {status['snapshot']}.</p>"
        + partitions_table([status])
        + publication_section(status.get("publication"))
        + "<h2>Over time</h2>"
        + "".join(charts)
        + compact_form(
            name, [p["partition"] for p in status["partitions"]], action_enabled, login=login
        )
        + "<h2>Recent plans</h2>"
        + plans_table(plans)
        + schema_section(schema)
    )
    return layout(f"Table {name}", body)


def schema_section(versions: Sequence[SchemaHistory]) -> str:
    """The current columns (the newest version's) and the history of versions."""
    if not versions:
        return '<h2>Schema</h2><p class="muted">No schema versions recorded.</p>'
    current = versions[-1]
    head = (
        "<tr><th>Id</th><th>Column</th><th>Type</th><th>Required</th><th>Default</th>"
        "<th>Doc</th><th>Key</th></tr>"
    )
    columns = [
        f'<tr data-column="{escape(c.name)}"><td class="num field-id">{_or_dash(c.field_id)}</td>'
        f'<td class="column-name">{escape(c.name)}</td>'
        f'<td class="column-type">{escape(c.type)}</td>'
        f'<td class="required">{"yes" if c.required else "no"}</td>'
        f'<td class="default">{escape(_or_dash(c.default_text))}</td>'
        f'<td class="doc">{escape(c.doc or "")}</td>'
        f"<td>{escape(_markers(c.key, c.partition))}</td></tr>"
        for c in current.columns
    ]
    history_head = (
        "<tr><th>Version</th><th>Began at snapshot</th><th>When</th><th>Changes</th></tr>"
    )
    history = [
        f'<tr data-schema="{v.schema_id}"><td class="num">{v.schema_id}</td>'
        f'<td class="num">{v.snapshot_id}</td>'
        f"<td>{'-' if v.created_at is None else _clock(v.created_at)}</td>"
        f'<td class="changes">{_changes(v)}</td></tr>'
        for v in reversed(versions)
    ]
    return (
        f"<h2>Schema</h2><p>Version {current.schema_id}, since snapshot "
        f"{current.snapshot_id}.</p>"
        f'<table id="schema-columns">{head}{"".join(columns)}</table>'
        f'<h3>Schema versions</h3><table id="schema-versions">{history_head}'
        f"{''.join(history)}</table>"
    )


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _markers(key: bool, partition: bool) -> str:
    return ", ".join(m for m, on in (("key", key), ("partition", partition)) if on)


def _changes(version: SchemaHistory) -> str:
    if not version.changes:
        return '<span class="muted">as created</span>' if version.schema_id == 0 else ""
    return "<br>".join(escape(change) for change in version.changes)


def compact_form(
    table: str, partitions: Sequence[str], enabled: bool, *, login: bool = False
) -> str:
    """The one action: a POST that needs the token, or with ``login`` a Postgres
    role that may ask for compactions, and its password."""
    if not enabled:
        return (
            '<h2>Request a compaction</h2><p class="muted" id="action-disabled">Read-only: '
            "set FIRN_DASHBOARD_OPERATORS (or FIRN_DASHBOARD_TOKEN) to enable requesting "
            "a compaction here.</p>"
        )
    credentials = (
        '<label>Role <input type="text" name="role" autocomplete="username"></label> '
        '<label>Password <input type="password" name="password" '
        'autocomplete="current-password"></label> '
        if login
        else '<label>Token <input type="password" name="token" autocomplete="off"></label> '
    )
    options = '<option value="">all partitions</option>' + "".join(
        f'<option value="{escape(p)}">{escape(partition_name(p))}</option>' for p in partitions
    )
    kinds = "".join(f'<option value="{k}">{k}</option>' for k in KINDS)
    return (
        '<h2>Request a compaction</h2><form method="post" action="/compact" id="compact">'
        f'<input type="hidden" name="table" value="{escape(table)}">'
        f'<label>Partition <select name="partition">{options}</select></label> '
        f'<label>Kind <select name="kind">{kinds}</select></label> '
        + credentials
        + '<button type="submit">Request</button></form>'
    )


def plans_table(plans: Sequence[PlanHistory]) -> str:
    if not plans:
        return '<p class="muted">No plans yet.</p>'
    head = (
        "<tr><th>Plan</th><th>Partition</th><th>Kind</th><th>State</th><th>Score</th>"
        "<th>Up to seq</th><th>Created</th><th>History</th></tr>"
    )
    lines = [
        f'<tr data-plan="{p.plan_id}"><td class="num">{p.plan_id}</td>'
        f"<td>{escape(partition_name(p.partition))}</td><td>{escape(p.kind)}</td>"
        f'<td class="plan-state">{escape(p.state)}</td><td class="num">{p.score:g}</td>'
        f'<td class="num">{p.to_seq}</td><td>{_clock(p.created_at)}</td>'
        f"<td>{_history(p)}</td></tr>"
        for p in plans
    ]
    return f'<table id="plans">{head}{"".join(lines)}</table>'


def _history(plan: PlanHistory) -> str:
    parts = [_moves(plan.transitions)]
    if plan.error:
        parts.append(f'<div class="error">{escape(plan.error)}</div>')
    for task in plan.tasks:
        parts.append(
            f"<details><summary>task {task.task_id} {escape(task.state)} "
            f"(attempt {task.attempt}, {size(task.input_bytes)})</summary>"
            f"{_moves(task.transitions)}</details>"
        )
    return "".join(parts)


def _moves(moves: Sequence[Transition]) -> str:
    if not moves:
        return '<span class="muted">no transitions</span>'
    # A creation is recorded from the empty state: it has no name to show.
    start = [escape(moves[0].from_state)] if moves[0].from_state else []
    steps = " → ".join(
        start
        + [
            f'<span title="{_clock(m.at)} {escape(m.reason)}">{escape(m.to_state)}</span>'
            for m in moves
        ]
    )
    return f'<span class="history">{steps}</span>'


def _clock(at: dt.datetime) -> str:
    return at.isoformat(sep=" ", timespec="seconds")


def action_page(ok: bool, message: str) -> str:
    css = "ok" if ok else "error"
    return layout(
        "Request a compaction",
        f'<pre class="{css}" id="action-result">{escape(message)}</pre>',
    )
