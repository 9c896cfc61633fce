"""``firn iceberg properties|publish|tables|serve``: every Firn table as an Apache Iceberg
table (``firn.iceberg``).

``serve`` runs a read-only Iceberg REST catalog over them (``firn.iceberg.rest``);
``properties`` prints what a reader passes to pyiceberg's ``load_catalog`` (with
``--json`` exactly that flat object, a contract for outside tools); ``publish``
brings tables' Iceberg tables up to their newest snapshot now, as the publisher
service does; ``tables`` shows what each table last published and how fresh it is
(``firn.catalog.publication``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from firn.api.catalog import connect
from firn.catalog.publication import PublicationStatus, publication_statuses
from firn.commands.output import Grid, Output, grid, int_between
from firn.errors import ConfigError
from firn.iceberg.names import iceberg_name
from firn.iceberg.properties import catalog_properties, io_properties
from firn.readable import duration, size
from firn.settings import FirnSettings
from firn.signals import serve_until_stopped

if TYPE_CHECKING:  # pyiceberg loads only for `firn iceberg serve`
    from firn.iceberg.rest import RestServer


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    iceberg = commands.add_parser(
        "iceberg", help="the tables as Apache Iceberg tables: reader properties, publish, state"
    )
    family = iceberg.add_subparsers(dest="iceberg_command", required=True)

    properties = family.add_parser(
        "properties",
        parents=[common],
        help="pyiceberg catalog properties of the published tables "
        "(--json: the object to pass to load_catalog)",
    )
    properties.set_defaults(run=show_properties)

    publish = family.add_parser(
        "publish",
        parents=[common],
        help="publish tables as Iceberg tables now (default: every table that is behind)",
    )
    publish.add_argument(
        "tables",
        nargs="*",
        metavar="TABLE",
        help="tables to publish (default: those behind; with --force, every table)",
    )
    publish.add_argument(
        "--force",
        action="store_true",
        help="write a new Iceberg snapshot even when nothing changed",
    )
    publish.set_defaults(run=run_publish)

    tables = family.add_parser(
        "tables",
        parents=[common],
        help="per table: Iceberg identifier, metadata file, what was published and when",
    )
    tables.set_defaults(run=show_tables)

    serve = family.add_parser(
        "serve",
        parents=[common],
        help="serve a read-only Iceberg REST catalog of the published tables until Ctrl-C",
    )
    serve.add_argument(
        "--port",
        type=int_between(0, 65535),
        help="port (default FIRN_ICEBERG_REST_PORT, or 9181 when that is 0; 0: a free one)",
    )
    serve.set_defaults(run=run_serve)


# -- serve ----------------------------------------------------------------------------

DEFAULT_REST_PORT = 9181


def run_serve(args: argparse.Namespace, settings: FirnSettings) -> int:
    from firn.iceberg.rest import serve  # pyiceberg loads only for this command

    port = args.port if args.port is not None else settings.iceberg_rest_port or DEFAULT_REST_PORT

    def announce(server: RestServer) -> None:
        if args.json:
            print(json.dumps({"url": server.url, "catalog": settings.iceberg_catalog}), flush=True)
        else:
            print(
                f"firn: Iceberg REST catalog at {server.url} (read-only; e.g. "
                f'load_catalog("firn", type="rest", uri="{server.url}")); Ctrl-C stops it',
                flush=True,
            )

    serve_until_stopped(lambda: serve(settings.with_local_stack(), port), announce)
    return 0


# -- properties -----------------------------------------------------------------------


def show_properties(args: argparse.Namespace, settings: FirnSettings) -> Output:
    properties = catalog_properties(settings)
    name = settings.iceberg_catalog
    width = max(len(key) for key in properties)
    lines = [f"Iceberg catalog {name!r} (pyiceberg load_catalog properties):"]
    lines += [f"  {key.ljust(width)}  {_shown(key, value)}" for key, value in properties.items()]
    lines += [
        "(the password is hidden here; --json prints it)"
        if _hide_password(properties.get("uri", "")) != properties.get("uri", "")
        else "",
        "Read a table with pyiceberg:",
        "  import json, subprocess; from pyiceberg.catalog import load_catalog",
        "  props = json.loads(subprocess.check_output("
        '["firn", "iceberg", "properties", "--json"]))',
        f'  load_catalog({name!r}, **props).load_table("TABLE").scan().to_arrow()',
    ]
    return Output(dict(properties), "\n".join(line for line in lines if line))


def _shown(key: str, value: str) -> str:
    return _hide_password(value) if key == "uri" else value


def _hide_password(uri: str) -> str:
    """``uri`` with the password of its user part replaced by ``***``."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# -- publish --------------------------------------------------------------------------


def run_publish(args: argparse.Namespace, settings: FirnSettings) -> Output:
    # Imported here: pyiceberg's writer is only needed by this command, and every
    # other `firn` command would otherwise pay for loading it.
    from firn.iceberg.publisher import Publisher

    with connect(settings=settings) as catalog:
        names = list(dict.fromkeys(args.tables))
        for name in names:
            catalog.table(name)  # ConfigError before anything is published
        publisher = Publisher(
            catalog.conn,
            catalog=settings.iceberg_catalog,
            io_properties=io_properties(settings),
        )
        by_id = {s.table_id: s.table for s in publication_statuses(catalog.conn)}
        if names:
            targets: list[str | int] = list(names)
        else:  # with --force every table, else those whose Iceberg table is behind
            targets = list(by_id) if args.force else list(publisher.due())
        results: list[dict[str, Any]] = []
        failed: list[str] = []
        for target in targets:
            name = target if isinstance(target, str) else by_id.get(target, str(target))
            try:
                results.append(publisher.publish(target, force=args.force).as_dict())
            except Exception as exc:  # recorded for `firn status`; the other tables go on
                message = f"{type(exc).__name__}: {exc}"
                results.append(failure(name, message))
                failed.append(f"{name}: {message}")
    error = f"publishing failed for {'; '.join(failed)}" if failed else None
    return Output({"publications": results}, publish_text(results), error)


def failure(table: str, message: str) -> dict[str, Any]:
    """A publication that raised, with the keys of ``Publication.as_dict``."""
    return {
        "table": table,
        "outcome": "failed",
        "identifier": "",
        "firn_snapshot": 0,
        "iceberg_snapshot": None,
        "sequence_number": 0,
        "metadata_location": None,
        "partitions_rewritten": 0,
        "bytes_written": 0,
        "lag_seconds": None,
        "changed_outside": False,
        "message": message,
        "removed_files": 0,
    }


def publish_text(results: list[dict[str, Any]]) -> str | Grid:
    """One row per table: outcome, Firn and Iceberg snapshot, lag, bytes written."""
    if not results:
        return "nothing to publish: every table's Iceberg table is up to date"
    return grid(
        (
            "TABLE",
            "OUTCOME",
            "ICEBERG",
            "FIRN SNAPSHOT",
            "ICEBERG SNAPSHOT",
            "LAG",
            "WRITTEN",
            "NOTE",
        ),
        [
            (
                r["table"],
                r["outcome"],
                r["identifier"],
                r["firn_snapshot"] if r["outcome"] in ("published", "unchanged") else None,
                r["iceberg_snapshot"],
                None if r["lag_seconds"] is None else duration(r["lag_seconds"]),
                size(r["bytes_written"]) if r["outcome"] == "published" else None,
                _note(r),
            )
            for r in results
        ],
    )


def _note(result: dict[str, Any]) -> str:
    notes = []
    if result["outcome"] == "published":
        notes.append(f"{result['partitions_rewritten']} partition(s) rewritten")
        if result["removed_files"]:
            notes.append(f"{result['removed_files']} expired file(s) removed")
    if result["changed_outside"]:
        notes.append("was changed outside Firn; republished")
    if result["message"]:
        notes.append(result["message"])
    return "; ".join(notes)


# -- tables ---------------------------------------------------------------------------


def show_tables(args: argparse.Namespace, settings: FirnSettings) -> Output:
    with connect(settings=settings) as catalog:
        statuses = publication_statuses(catalog.conn)
    rows = [table_entry(s) for s in statuses]
    return Output({"tables": rows}, tables_text(rows))


def table_entry(status: PublicationStatus) -> dict[str, Any]:
    """One table's publication, with the identifier it is (or would be) published under."""
    entry = {"table": status.table, **status.as_dict()}
    if entry["identifier"] is None:
        try:
            entry["identifier"] = str(iceberg_name(status.table))
        except ConfigError:
            entry["identifier"] = None  # the publisher refuses it and says why
    return entry


def tables_text(rows: list[dict[str, Any]]) -> str | list[str | Grid]:
    if not rows:
        return "no tables"
    table = grid(
        ("TABLE", "ICEBERG", "STATE", "FIRN SNAPSHOT", "PUBLISHED AT", "LAG", "METADATA"),
        [
            (
                r["table"],
                r["identifier"],
                _state_text(r),
                r["firn_snapshot"],
                _clock(r["published_at"]),
                None if r["lag_seconds"] is None else duration(r["lag_seconds"]),
                r["metadata_location"],
            )
            for r in rows
        ],
    )
    errors = [
        f"  {r['table']}: last publication failed: {r['last_error']}"
        for r in rows
        if r["last_error"]
    ]
    return [table, *errors]


def _state_text(row: dict[str, Any]) -> str:
    if row["state"] == "behind" and row["behind_seconds"] is not None:
        return (
            f"behind {duration(row['behind_seconds'])} "
            f"({row['waiting_snapshots']} snapshot(s) waiting)"
        )
    return str(row["state"])


def _clock(iso: str | None) -> str | None:
    if iso is None:
        return None
    return dt.datetime.fromisoformat(iso).isoformat(sep=" ", timespec="seconds")
