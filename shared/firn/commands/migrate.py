"""``firn migrate [--service-logins]``: bring the catalog up to date as its admin, and
give each service a login role of its own (``firn_<service>_login``) with the
password in ``FIRN_<SERVICE>_DATABASE_PASSWORD``. Every firn command migrates a
catalog it opens as the admin; this one is for deployments whose services log in as
their own roles (compose runs it once before them), since those roles may not
migrate."""

from __future__ import annotations

import argparse
import os
from typing import Any

from firn.api.catalog import connect
from firn.catalog.grants import SERVICES, service_login
from firn.commands.output import Output
from firn.errors import ConfigError
from firn.postgres import applied_versions
from firn.settings import FirnSettings


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    command = commands.add_parser(
        "migrate",
        parents=[common],
        help="bring the catalog up to date (as its admin); make the services' login roles",
    )
    command.add_argument(
        "--service-logins",
        action="store_true",
        help="create or update firn_<service>_login for every service, with the password "
        "in FIRN_<SERVICE>_DATABASE_PASSWORD (all five must be set)",
    )
    command.set_defaults(run=run_migrate)


def password_variable(service: str) -> str:
    return f"FIRN_{service.upper()}_DATABASE_PASSWORD"


def run_migrate(args: argparse.Namespace, settings: FirnSettings) -> Output:
    passwords = _passwords() if args.service_logins else {}
    with connect(settings=settings) as catalog:
        version = applied_versions(catalog.conn)[-1]
        logins = {name: service_login(catalog.conn, name, pw) for name, pw in passwords.items()}
    text = f"the catalog is at migration {version:04d}"
    if logins:
        text += "; service logins: " + ", ".join(logins.values())
    return Output({"version": version, "logins": logins}, text)


def _passwords() -> dict[str, str]:
    passwords = {name: os.environ.get(password_variable(name), "") for name in SERVICES}
    missing = [password_variable(name) for name, pw in passwords.items() if not pw]
    if missing:
        raise ConfigError(f"--service-logins needs {', '.join(missing)}")
    return passwords
