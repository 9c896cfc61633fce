"""``firn grant TABLE ROLE`` / ``firn revoke TABLE ROLE``: which producer roles may
commit to a table (``firn.Catalog.grant``). Run with the catalog admin's database URL.

``firn grant ... --json`` prints ``{"role": ..., "database_url": ...}`` (with
``table`` and ``created``); outside tools read that shape. The URL carries the new
role's password only when the role was created now: the one time it is shown."""

from __future__ import annotations

import argparse
from typing import Any

from firn.api.catalog import connect
from firn.commands.output import Output
from firn.settings import FirnSettings


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    grant = commands.add_parser(
        "grant",
        parents=[common],
        help="let a Postgres role commit change sets to a table (creates the login role)",
    )
    grant.add_argument("table")
    grant.add_argument("role", help="the producer's role: lower-case letters, digits and _")
    grant.set_defaults(run=run_grant)
    revoke = commands.add_parser(
        "revoke", parents=[common], help="take a role's right to commit to a table away"
    )
    revoke.add_argument("table")
    revoke.add_argument("role")
    revoke.set_defaults(run=run_revoke)


def run_grant(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        granted = catalog.grant(args.table, args.role)
    if granted.created:
        text = (
            f"created login role {granted.role} and granted it commits to {granted.table}; "
            "its password is in this URL and is not shown again:\n"
            f"FIRN_DATABASE_URL={granted.database_url}"
        )
    else:
        text = (
            f"granted role {granted.role} commits to {granted.table}; the role existed, "
            f"its password is unchanged:\nFIRN_DATABASE_URL={granted.database_url}"
        )
    data = {
        "role": granted.role,
        "database_url": granted.database_url,
        "table": granted.table,
        "created": granted.created,
    }
    return Output(data, text)


def run_revoke(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        table = catalog.table(args.table).name
        revoked = catalog.revoke(table, args.role)
    text = (
        f"role {args.role} may no longer commit to {table}"
        if revoked
        else f"role {args.role} had no grant on {table}; nothing changed"
    )
    return Output({"role": args.role, "table": table, "revoked": revoked}, text)
