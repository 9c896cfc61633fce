"""``firn verify TABLE``: check every live file against the catalog (``Table.verify``),
like a file system check: one line per problem, a summary, exit status 0 when the
table is sound and 1 when anything is wrong. A long run shows its progress on
stderr, at most once a second."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from firn.api.catalog import connect
from firn.commands.output import Output
from firn.engine.verify import VerifyReport
from firn.readable import partition_name, size
from firn.settings import FirnSettings

PROGRESS_SECONDS = 1.0
"""How often, at most, progress goes to stderr; a check quicker than this shows none."""


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    command = commands.add_parser(
        "verify",
        parents=[common],
        help="check every live file of a table against the catalog (exit 1 on problems)",
    )
    command.add_argument("table")
    command.add_argument(
        "--snapshot", type=int, help="check the files of this snapshot (default: the latest)"
    )
    command.add_argument(
        "--deep",
        action="store_true",
        help="also decode and count every row (reads the whole table)",
    )
    command.set_defaults(run=run_verify)


class _StderrProgress:
    """Prints ``checked N/M files`` to stderr, at most once a second."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.last = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS or (self.shown and done == total):
            print(f"firn: verifying {self.table}: {done}/{total} files", file=sys.stderr)
            self.last, self.shown = now, True


def run_verify(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        table = catalog.table(args.table)
        report = table.verify(args.snapshot, deep=args.deep, progress=_StderrProgress(table.name))
    error = None
    if not report.ok:
        error = (
            f"{len(report.problems)} problem(s) in {report.damaged_files} of "
            f"{report.files_checked} file(s) of {report.table}"
        )
    return Output(report.as_dict(), _text(report), error)


def _text(report: VerifyReport) -> str:
    lines = [
        f"{p.path}: {p.kind}: {p.detail} "
        f"({partition_name(p.partition)}, {p.store} {p.file_type}, file id {p.file_id})"
        for p in report.problems
    ]
    depth = ", every row decoded" if report.deep else ""
    verdict = "clean" if report.ok else f"{len(report.problems)} problem(s)"
    lines.append(
        f"{report.table} at snapshot {report.snapshot}: {report.files_checked} file(s) "
        f"checked ({size(report.bytes_checked)}{depth}), {verdict}"
    )
    return "\n".join(lines)
