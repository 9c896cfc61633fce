"""``firn status [TABLE]`` and ``firn tasks [TABLE]``: what waits to be compacted and
what the compaction machinery is doing. Read-only.

``status`` is ``Table.status()`` rendered; across tables, partitions with the
highest score (the most read amplification) come first, the order the services
serve them in. ``status --fleet`` is every table at a glance
(``firn.catalog.fleet``), for a catalog of thousands.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from firn.api.catalog import connect
from firn.catalog.fleet import FleetStatus, fleet_status
from firn.catalog.listing import list_tasks
from firn.commands.output import Grid, Output, grid, int_between
from firn.errors import ConfigError
from firn.model.states import TaskState
from firn.readable import freshness, partition_name, size
from firn.settings import FirnSettings

MAX_LIMIT = 100_000


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    status = commands.add_parser(
        "status", parents=[common], help="per partition: merge state, score, due compaction"
    )
    status.add_argument("table", nargs="?", help="one table (default: all)")
    status.add_argument(
        "--fleet",
        action="store_true",
        help="every table at a glance: partitions due, the longest wait, the biggest debts",
    )
    status.add_argument(
        "--top",
        type=int_between(1, MAX_LIMIT),
        default=10,
        help="with --fleet: list this many tables that owe the most (default 10)",
    )
    status.set_defaults(run=show_status)

    tasks = commands.add_parser("tasks", parents=[common], help="compaction tasks, newest first")
    tasks.add_argument("table", nargs="?", help="one table (default: all)")
    tasks.add_argument(
        "--state",
        type=task_state,
        help=f"only tasks in this state: {', '.join(s.value for s in TaskState)}",
    )
    tasks.add_argument(
        "--limit",
        type=int_between(1, MAX_LIMIT),
        default=50,
        help=f"at most this many (default 50, at most {MAX_LIMIT:,})",
    )
    tasks.set_defaults(run=show_tasks)


def task_state(text: str) -> TaskState:
    """An argparse type: a task state, in any letter case."""
    for state in TaskState:
        if state.value.lower() == text.strip().lower():
            return state
    raise argparse.ArgumentTypeError(
        f"unknown task state {text!r} (choose from {', '.join(s.value for s in TaskState)})"
    )


def show_status(args: argparse.Namespace, settings: FirnSettings) -> Output:
    if args.fleet:
        if args.table:
            raise ConfigError("--fleet shows every table; drop the table name, or --fleet")
        return show_fleet(settings, args.top)
    with connect(settings=settings) as catalog:
        names = [args.table] if args.table else catalog.tables()
        statuses = [catalog.table(name).status() for name in names]
    for status in statuses:
        status["partitions"].sort(key=lambda p: (-p["score"], p["partition"]))
    statuses.sort(key=lambda s: (-_top_score(s), s["table"]))
    return Output({"tables": statuses}, _status_text(statuses))


def show_fleet(settings: FirnSettings, top: int) -> Output:
    with connect(settings=settings) as catalog:
        fleet = fleet_status(catalog.conn, top=top)
    return Output({"fleet": fleet.as_dict()}, _fleet_text(fleet))


def _fleet_text(fleet: FleetStatus) -> list[str | Grid]:
    lines: list[str | Grid] = [
        f"fleet: {fleet.tables} tables, {fleet.partitions} partitions",
        f"  due: {fleet.partitions_due} partitions ({fleet.due_share:.1%}) of "
        f"{fleet.tables_due} tables; {fleet.partitions_unmerged} partitions have unmerged "
        "changes",
        f"  open plans: {fleet.open_plans} (tasks: {fleet.tasks_text})",
    ]
    oldest = fleet.oldest_due
    if oldest is not None:
        lines.append(
            f"  waiting longest: {oldest.table} {partition_name(oldest.partition)}, "
            f"{oldest.due} due, oldest change {_age(oldest.waiting_seconds)}"
        )
    if fleet.debts:
        lines.append(
            grid(
                ("TABLE", "DUE", "UNMERGED", "OLDEST CHANGE", "OPEN PLANS"),
                [
                    (
                        d.table,
                        f"{d.partitions_due}/{d.partitions_unmerged} partitions",
                        f"{d.unmerged_files} files, {size(d.unmerged_bytes)}",
                        _age(d.oldest_change_seconds),
                        d.open_plans,
                    )
                    for d in fleet.debts
                ],
            )
        )
    return lines


def _age(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.0f}s ago"


def _top_score(status: dict[str, Any]) -> float:
    return max((p["score"] for p in status["partitions"]), default=0.0)


def _status_text(statuses: list[dict[str, Any]]) -> str | list[str | Grid]:
    if not statuses:
        return "no tables"
    rows = sorted(
        ((s["table"], p) for s in statuses for p in s["partitions"]),
        key=lambda tp: (-tp[1]["score"], tp[0], tp[1]["partition"]),
    )
    published = {s["table"]: freshness(s.get("publication")) for s in statuses}
    table = grid(
        (
            "TABLE",
            "PARTITION",
            "MERGED/MAX SEQ",
            "UNMERGED",
            "SCORE",
            "DUE",
            "OPEN PLAN",
            "LAST",
            "PUBLISHED",
        ),
        [
            (
                name,
                partition_name(p["partition"]),
                f"{p['max_merged_seq']}/{p['max_seq']}",
                f"{p['unmerged_files']} files, {size(p['unmerged_bytes'])}",
                f"{p['score']:g}",
                p["due"],
                _plan_text(p["open_plan"]),
                _last_text(p["last_compaction"]),
                published[name],
            )
            for name, p in rows
        ],
    )
    lines: list[str | Grid] = [table] if rows else []
    for name, p in rows:
        if p["reasons"]:
            where = f"{name} {partition_name(p['partition'])}"
            lines.append(f"  {where}: {p['due']} due: {'; '.join(p['reasons'])}")
    for s in statuses:
        error = (s.get("publication") or {}).get("last_error")
        if error:
            lines.append(f"  {s['table']}: Iceberg publication failed: {error}")
    empty = [s["table"] for s in statuses if not s["partitions"]]
    if empty:
        lines.append(
            "no data yet: " + ", ".join(f"{name} (published: {published[name]})" for name in empty)
        )
    return lines


def _plan_text(plan: dict[str, Any] | None) -> str | None:
    if plan is None:
        return None
    tasks = ", ".join(f"{state} {n}" for state, n in sorted(plan["tasks"].items()))
    queue = f", queue #{plan['queue']}" if plan.get("queue") else ""
    return f"{plan['plan_id']} {plan['kind']} {plan['state']} ({tasks or 'no tasks'}{queue})"


def _last_text(last: dict[str, Any] | None) -> str | None:
    if last is None:
        return None
    at = dt.datetime.fromisoformat(last["at"]).isoformat(sep=" ", timespec="seconds")
    return f"plan {last['plan_id']} {last['kind']} @ snapshot {last['snapshot']}, {at}"


def show_tasks(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        table_id = catalog.table(args.table).table_id if args.table else None
        rows = list_tasks(catalog.conn, table_id=table_id, state=args.state, limit=args.limit)
    tasks = [r.as_dict() for r in rows]
    if not tasks:
        return Output({"tasks": []}, "no tasks")
    text = grid(
        ("TABLE", "PARTITION", "PLAN", "KIND", "TASK", "STATE", "ATTEMPT", "LEASE", "UPDATED"),
        [
            (
                r.table,
                partition_name(r.partition),
                f"{r.plan_id} ({r.plan_state})",
                r.plan_kind,
                r.task_id,
                r.state,
                r.attempt,
                None
                if r.lease_owner is None
                else f"{r.lease_owner} until {_clock(r.lease_expires)}",
                r.updated_at.isoformat(sep=" ", timespec="seconds"),
            )
            for r in rows
        ],
    )
    errors = [f"  task {r.task_id}: {r.error}" for r in rows if r.error]
    return Output({"tasks": tasks}, [text, *errors])


def _clock(at: dt.datetime | None) -> str:
    return "?" if at is None else at.isoformat(sep=" ", timespec="seconds")
