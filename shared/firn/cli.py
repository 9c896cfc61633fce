"""The ``firn`` command line.

``firn up`` / ``firn down`` drive the local stack (its code lives in ``deploy/``);
``firn service NAME`` runs one service process. Every command takes ``--json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from firn import __version__, logs
from firn.errors import FirnError
from firn.settings import FirnSettings

SERVICES = {
    "metrics": "metrics",
    "planner": "planner",
    "dispatcher": "dispatcher",
    "executor-dispatcher": "dispatcher",
    "committer": "committer",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="firn", description="Asynchronous compaction for primary-keyed lakehouse tables."
    )
    parser.add_argument("--version", action="version", version=f"firn {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start Postgres, Kafka and the four services")
    up.add_argument("--no-services", action="store_true", help="start only Postgres and Kafka")
    up.add_argument("--json", action="store_true", help="machine-readable output")

    down = commands.add_parser("down", help="stop what `firn up` started")
    down.add_argument("--json", action="store_true", help="machine-readable output")

    service = commands.add_parser("service", help="run one service process")
    service.add_argument("name", choices=sorted(SERVICES))
    service.add_argument(
        "--json", action="store_true", help="accepted for symmetry; a service only logs"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = FirnSettings()
    except ValidationError as exc:
        return _fail(f"invalid FIRN_ settings:\n{exc}", args.json)
    logs.configure(settings.log_level)
    try:
        if args.command == "service":
            module = importlib.import_module(f"firn_services.{SERVICES[args.name]}.main")
            module.main(settings)
            return 0
        commands = importlib.import_module("firn_localstack.commands")
        if args.command == "up":
            code: int = commands.up(settings, services=not args.no_services, as_json=args.json)
        else:
            code = commands.down(settings, as_json=args.json)
        return code
    except FirnError as exc:
        return _fail(str(exc), args.json)


def _fail(message: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": message}))
    else:
        print(f"firn: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
