"""The ``firn`` command line.

``firn up`` / ``firn down`` drive the local stack (its code lives in ``deploy/``;
``firn up --demo`` adds a synthetic producer, ``firn demo`` runs it alone against a
running stack);
``firn service NAME`` runs one service process; ``table``, ``schema``, ``alter``,
``status``, ``tasks``, ``compact``, ``expire`` and ``verify`` work on tables
(``firn.commands``); ``iceberg`` publishes them as Iceberg tables and tells readers
how to reach them;
``dashboard`` serves the web dashboard. Every command takes
``--json``: one JSON document on stdout, ``{"error": ...}`` (exit status 1) when it
fails; without it, text for people and ``firn: error: ...`` on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from firn import __version__, logs
from firn.commands import (
    compact,
    dashboard,
    expire,
    grants,
    iceberg,
    kafka_acls,
    migrate,
    schema,
    status,
    tables,
    verify,
)
from firn.commands.output import (
    Output,
    int_between,
    positive_up_to,
    ratio,
    seconds_up_to,
    show,
)
from firn.errors import ConfigError, FirnError
from firn.settings import FirnSettings

DAY = 86400.0

SERVICES = {
    "metrics": "metrics",
    "planner": "planner",
    "dispatcher": "dispatcher",
    "executor-dispatcher": "dispatcher",
    "committer": "committer",
    "publisher": "publisher",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="firn", description="Asynchronous compaction for primary-keyed lakehouse tables."
    )
    parser.add_argument("--version", action="version", version=f"firn {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser(
        "up", parents=[common], help="start Postgres, Kafka and the five services"
    )
    up.add_argument("--no-services", action="store_true", help="start only Postgres and Kafka")
    up.add_argument(
        "--secure-kafka",
        action="store_true",
        help="run the broker with SASL (SCRAM-SHA-512) over TLS and ACLs; every service "
        "logs in as its own principal, and <home>/kafka/<role>.env holds each role's login",
    )
    _add_demo_options(up)
    up.set_defaults(run=_up)

    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run only the demo producer, against a stack already running "
        "(FIRN_DATABASE_URL, FIRN_KAFKA_BOOTSTRAP, FIRN_WAREHOUSE)",
    )
    _add_demo_options(demo, flag=False)
    demo.set_defaults(run=_demo)

    down = commands.add_parser("down", parents=[common], help="stop what `firn up` started")
    down.set_defaults(run=_down)

    service = commands.add_parser("service", help="run one service process")
    service.add_argument("name", choices=sorted(SERVICES))
    service.add_argument(
        "--json", action="store_true", help="accepted for symmetry; a service only logs"
    )
    service.set_defaults(run=_service)

    families = (
        tables,
        schema,
        status,
        compact,
        expire,
        verify,
        grants,
        migrate,
        kafka_acls,
        iceberg,
        dashboard,
    )
    for family in families:
        family.add_commands(commands, common)
    return parser


# The ``firn up`` options that become ``DemoOptions`` fields (unset ones keep its defaults).
_DEMO_OPTIONS = (
    "table",
    "rate",
    "keys",
    "batch",
    "delete_ratio",
    "distribution",
    "duration",
    "idle_seconds",
    "seed",
    "stall_wait",
    "carry",
    "properties",
)


def _add_demo_options(parser: argparse.ArgumentParser, *, flag: bool = True) -> None:
    """The producer's options; ``flag`` adds ``--demo`` (``firn up``, where they
    apply only with it)."""
    demo = parser.add_argument_group(
        "demo", "a synthetic CDC producer with live progress and a summary when stopped"
    )
    if flag:
        demo.add_argument(
            "--demo", action="store_true", help="also run the demo producer (needs the services)"
        )
    demo.add_argument("--table", help="demo table (default demo.orders; created when missing)")
    demo.add_argument("--rate", type=positive_up_to(1000), help="commits per second (default 2)")
    demo.add_argument(
        "--keys",
        type=int_between(1, 10**9),
        help="order ids 0..KEYS-1 (default 10000; ordered counts up past it)",
    )
    demo.add_argument("--batch", type=int_between(1, 100_000), help="rows per commit (default 100)")
    demo.add_argument(
        "--delete-ratio",
        type=ratio,
        metavar="D",
        help="share of rows that delete a live order, in [0, 1) (default 0.1); "
        "the rest insert or update an order picked by --distribution",
    )
    demo.add_argument(
        "--distribution",
        choices=("uniform", "ordered", "appends", "skewed"),
        help="how upserts pick order ids: uniform over the key space (default); ordered, "
        "new ids in increasing order with 3%% late updates of older ones (an event log); "
        "appends, new ids in increasing order only; skewed, 90%% of upserts to 1%% of the keys",
    )
    demo.add_argument(
        "--duration",
        type=seconds_up_to(DAY * 30),
        metavar="SECONDS",
        help="stop after producing this long (default: until Ctrl-C)",
    )
    demo.add_argument(
        "--idle-seconds",
        type=seconds_up_to(3600, zero=True),
        metavar="SECONDS",
        help="measure the idle stack this long before producing "
        f"(default {10 if flag else 0}; 0: skip)",
    )
    demo.add_argument("--seed", type=int_between(0, 2**63 - 1), help="random seed of the workload")
    demo.add_argument(
        "--stall-wait",
        type=seconds_up_to(3600, zero=True),
        metavar="SECONDS",
        help="honour back-pressure: a commit that finds a node at write.stall-runs waits up "
        "to this long for compaction (default: never wait)",
    )
    demo.add_argument(
        "--carry",
        action="store_true",
        default=None,
        help="rows that fall due while the producer is behind (a stalled or slow commit) go "
        "into its next commit, up to a second's worth, as a CDC source's queue would "
        "(default: it falls behind, committing --batch rows each time)",
    )
    demo.add_argument(
        "--property",
        dest="properties",
        action="append",
        metavar="KEY=VALUE",
        help="a property of the demo table over the demo's own (e.g. minor.file-count=8); "
        "repeatable; set on a kept table too",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = FirnSettings()
    except ValidationError as exc:
        return _fail(f"invalid FIRN_ settings:\n{exc}", args.json)
    if args.command not in ("up", "down", "service", "demo"):
        _quiet_logging(settings)
    try:
        result: Output | int = args.run(args, settings)
    except FirnError as exc:
        return _fail(str(exc), args.json)
    if isinstance(result, int):
        return result
    try:
        if args.json:
            error = {} if result.error is None else {"error": result.error}
            print(json.dumps({**error, **result.data}, default=str))
        else:
            show(result, sys.stdout)
    except BrokenPipeError:
        # The reader went away (``firn tasks | head``): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if result.error is not None:
        if not args.json:
            print(f"firn: error: {result.error}", file=sys.stderr)
        return 1
    return 0


def _flag(option: str) -> str:
    return "--property" if option == "properties" else "--" + option.replace("_", "-")


def _demo_options(args: argparse.Namespace) -> dict[str, Any]:
    """The demo options given on the command line, as ``DemoOptions`` fields."""
    given = {name: getattr(args, name) for name in _DEMO_OPTIONS}
    demo = {name: value for name, value in given.items() if value is not None}
    if "properties" in demo:
        demo["properties"] = tables.parse_properties(demo["properties"])
    return demo


def _up(args: argparse.Namespace, settings: FirnSettings) -> int:
    demo = _demo_options(args)
    if demo and not args.demo:
        flags = ", ".join(_flag(name) for name in demo)
        raise ConfigError(f"{flags} only apply with --demo")
    logs.configure(settings.log_level)
    code: int = _localstack().up(
        settings,
        services=not args.no_services,
        as_json=args.json,
        demo=demo if args.demo else None,
        secure_kafka=args.secure_kafka,
    )
    return code


def _down(args: argparse.Namespace, settings: FirnSettings) -> int:
    logs.configure(settings.log_level)
    code: int = _localstack().down(settings, as_json=args.json)
    return code


def _demo(args: argparse.Namespace, settings: FirnSettings) -> int:
    logs.configure(settings.log_level)
    producer = importlib.import_module("firn_localstack.producer")
    code: int = producer.demo(settings.with_local_stack(), _demo_options(args), as_json=args.json)
    return code


def _service(args: argparse.Namespace, settings: FirnSettings) -> int:
    logs.configure(settings.log_level)
    # Beside a running `firn up`, a service started by hand joins that stack: this is
    # how one more dispatcher (or any service) is added to share the work.
    service = SERVICES[args.name]
    module = importlib.import_module(f"firn_services.{service}.main")
    if "application_name" not in settings.model_fields_set:
        settings = settings.model_copy(update={"application_name": f"firn-{service}"})
    module.main(settings.with_local_stack())
    return 0


def _localstack() -> Any:
    return importlib.import_module("firn_localstack.commands")


def _fail(message: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": message}))
    else:
        print(f"firn: error: {message}", file=sys.stderr)
    return 1


def _quiet_logging(settings: FirnSettings) -> None:
    """Table commands log warnings only, unless FIRN_LOG_LEVEL asks for more; a host
    that configured logging already (an embedding program, pytest) keeps its own."""
    if not logging.getLogger().handlers:
        explicit = "log_level" in settings.model_fields_set
        logs.configure(settings.log_level if explicit else "WARNING")
