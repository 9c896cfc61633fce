"""``firn expire [TABLE] [--dry-run]``: apply retention now (design §7), as the
committer does every few minutes (``firn.catalog.expiry``), with the storage-listing
orphan sweep (``firn.catalog.orphans``), whose progress counts go to stderr."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from firn.api.catalog import connect
from firn.catalog.expiry import ExpiryReport, expire
from firn.catalog.orphans import SweepProgress
from firn.commands.output import Output
from firn.readable import size
from firn.settings import FirnSettings

LISTED = 20
"""Paths shown per table in text; --json lists them all."""


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    command = commands.add_parser(
        "expire",
        parents=[common],
        help="delete files of expired snapshots, old orphans and unknown files in storage "
        "(snapshot/orphan.retention)",
    )
    command.add_argument("table", nargs="?", help="one table (default: all)")
    command.add_argument(
        "--dry-run", action="store_true", help="list what would go; delete nothing"
    )
    command.set_defaults(run=run_expire)


def run_expire(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        report = expire(catalog.conn, args.table, dry_run=args.dry_run, progress=_progress)
    return Output(report.as_dict(), _text(report))


def _progress(state: SweepProgress) -> None:
    print(
        f"firn: {state.table}: listed {state.listed} file(s), "
        f"{state.unreferenced} unknown to the catalog and past orphan.retention",
        file=sys.stderr,
        flush=True,
    )


def _text(report: ExpiryReport) -> str:
    verb = "would expire" if report.dry_run else "expired"
    lines = []
    for t in report.tables:
        lines.append(
            f"{t.table}: {verb} {t.expired_snapshots} snapshot(s) (oldest kept: {t.keep_from}), "
            f"{len(t.files)} data file(s) ({size(t.bytes)}), {len(t.orphans)} orphan(s), "
            f"{len(t.swept)} unknown file(s) in storage ({size(t.swept_bytes)}), "
            f"{t.history.rows} history row(s)"
        )
        if report.dry_run:
            paths = [*t.files, *t.orphans, *t.swept]
            lines += [f"  {path}" for path in paths[:LISTED]]
            if len(paths) > LISTED:
                lines.append(f"  ... and {len(paths) - LISTED} more (--json lists them all)")
    if not report.tables:
        lines.append("no tables")
    return "\n".join(lines)
