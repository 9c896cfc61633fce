"""``firn dashboard``: serve the web dashboard until Ctrl-C."""

from __future__ import annotations

import argparse
import json
from typing import Any

from firn.commands.compact import request_compaction
from firn.commands.output import int_between
from firn.dashboard import DashboardServer, serve
from firn.settings import FirnSettings
from firn.signals import serve_until_stopped


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    command = commands.add_parser(
        "dashboard",
        parents=[common],
        help="serve the web dashboard (tables, partitions, tasks, charts) until Ctrl-C",
    )
    command.add_argument(
        "--port",
        type=int_between(0, 65535),
        help="port (default FIRN_DASHBOARD_PORT, 9470; 0: a free one)",
    )
    command.set_defaults(run=run_dashboard)


def run_dashboard(args: argparse.Namespace, settings: FirnSettings) -> int:
    def announce(server: DashboardServer) -> None:
        enabled = server.dashboard.action_enabled
        if args.json:
            print(json.dumps({"url": server.url, "action_enabled": enabled}), flush=True)
        else:
            token = "enabled" if enabled else "disabled (no FIRN_DASHBOARD_TOKEN)"
            print(
                f"firn: dashboard at {server.url} (compaction requests {token}); Ctrl-C stops it",
                flush=True,
            )

    serve_until_stopped(
        lambda: serve(settings.with_local_stack(), request_compaction, args.port), announce
    )
    return 0
