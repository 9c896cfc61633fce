"""``firn kafka-acls [--users]``: prepare a Kafka cluster that has an authorizer for
Firn, as its administrator (``FIRN_KAFKA_CONFIG`` and ``FIRN_KAFKA_SASL_PASSWORD``
log in as a super user).

It creates every Firn topic (so no service needs to), the ACLs of each principal
(``firn.kafka.acls.layout``), and with ``--users`` the SCRAM-SHA-512 credentials of
each principal whose password is in ``FIRN_KAFKA_<ROLE>_PASSWORD``. Running it again
changes nothing but the passwords given.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from firn.commands.output import Output
from firn.errors import ConfigError
from firn.kafka.acls import ROLES, Access, password_variable, prepare
from firn.settings import FirnSettings


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    command = commands.add_parser(
        "kafka-acls",
        parents=[common],
        help="as the Kafka admin: create Firn's topics and each principal's ACLs "
        "(and with --users its SCRAM credentials)",
    )
    command.add_argument(
        "--users",
        action="store_true",
        help="create or update the SCRAM-SHA-512 user firn-<role> of every role whose "
        "password is in FIRN_KAFKA_<ROLE>_PASSWORD (roles: " + ", ".join(ROLES) + ")",
    )
    command.set_defaults(run=run_kafka_acls)


def run_kafka_acls(args: argparse.Namespace, settings: FirnSettings) -> Output:
    done = prepare(settings, _passwords() if args.users else {})
    principals = {access.principal: _describe(access) for access in done.accesses}
    text = f"{done.acls} ACLs for {len(principals)} principals"
    if done.users:
        text += "; SCRAM users set: " + ", ".join(done.users)
    return Output({"principals": principals, "users": done.users, "acls": done.acls}, text)


def _describe(access: Access) -> dict[str, Any]:
    return {
        "group": access.group,
        "reads": list(access.reads),
        "writes": list(access.writes),
        "describes_prefix": access.describes_prefix,
        "creates_prefix": access.creates_prefix,
    }


def _passwords() -> dict[str, str]:
    passwords = {role: os.environ.get(password_variable(role), "") for role in ROLES}
    given = {role: pw for role, pw in passwords.items() if pw}
    if not given:
        names = ", ".join(password_variable(role) for role in ROLES)
        raise ConfigError(f"--users needs at least one of {names}")
    return given
