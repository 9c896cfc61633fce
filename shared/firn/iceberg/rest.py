"""A read-only Iceberg REST catalog over the published tables.

Engines that speak Iceberg's REST catalog protocol (pyiceberg's ``type=rest``,
DuckDB's ``ATTACH ... (TYPE iceberg, ENDPOINT ...)``, Spark's ``type=rest``, Trino)
reach the published tables through it with no Postgres login and whatever catalog
name they like. It serves what the SQL catalog rows in Firn's Postgres say
(``firn.iceberg.pointers``): the config, namespaces, table lists and each table's
current metadata; every write is refused (405: the tables are Firn's, published by
the publisher). ``firn iceberg serve`` runs it; the publisher service does too when
``FIRN_ICEBERG_REST_PORT`` is set.

Namespace levels in a path are joined by the unit separator (``%1F``), as the
protocol says. Metadata files never change once written, so each one read is kept
(a few hundred, newest first).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from pyiceberg.io import load_file_io

from firn.iceberg.properties import io_properties
from firn.postgres.connection import Connection, connect
from firn.settings import FirnSettings

log = logging.getLogger(__name__)

SEPARATOR = "\x1f"
METADATA_CACHED = 256


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any] | None = None


def _error(status: HTTPStatus, kind: str, message: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": kind, "code": int(status)}})


class RestCatalog:
    """The routes, over a connection factory (one connection per request: requests
    come on threads of their own)."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        catalog: str,
        io_properties: dict[str, str] | None = None,
    ) -> None:
        self.connect = connect
        self.catalog = catalog
        self.io_properties = dict(io_properties or {})
        self._metadata: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, target: str, head: bool = False) -> Reply:
        path = urlsplit(target).path.rstrip("/")
        parts = [unquote(p) for p in path.split("/")[1:]]
        if parts[:1] != ["v1"]:
            return _error(HTTPStatus.NOT_FOUND, "NoSuchEndpointException", f"no route {path}")
        rest = parts[1:]
        if rest == ["config"]:
            return Reply(HTTPStatus.OK, {"defaults": {}, "overrides": {}})
        if rest == ["namespaces"]:
            return Reply(HTTPStatus.OK, {"namespaces": [ns.split(".") for ns in self._spaces()]})
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace = rest[1].split(SEPARATOR)
            text = ".".join(namespace)
            if text not in self._spaces():
                return _error(
                    HTTPStatus.NOT_FOUND, "NoSuchNamespaceException", f"no namespace {text}"
                )
            if len(rest) == 2:
                return Reply(
                    HTTPStatus.NO_CONTENT if head else HTTPStatus.OK,
                    None if head else {"namespace": namespace, "properties": {}},
                )
            if len(rest) == 3 and rest[2] == "tables":
                return Reply(
                    HTTPStatus.OK,
                    {
                        "identifiers": [
                            {"namespace": namespace, "name": name} for name in self._tables(text)
                        ]
                    },
                )
            if len(rest) == 4 and rest[2] == "tables":
                return self._table(text, rest[3], head)
        return _error(HTTPStatus.NOT_FOUND, "NoSuchEndpointException", f"no route {path}")

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()

    def _spaces(self) -> set[str]:
        rows = self._query(
            "SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = %s "
            "UNION SELECT table_namespace FROM iceberg_tables WHERE catalog_name = %s",
            (self.catalog, self.catalog),
        )
        return {str(ns) for (ns,) in rows if ns}

    def _tables(self, namespace: str) -> list[str]:
        rows = self._query(
            "SELECT table_name FROM iceberg_tables WHERE catalog_name = %s "
            "AND table_namespace = %s ORDER BY table_name",
            (self.catalog, namespace),
        )
        return [str(name) for (name,) in rows]

    def _table(self, namespace: str, name: str, head: bool) -> Reply:
        rows = self._query(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = %s "
            "AND table_namespace = %s AND table_name = %s",
            (self.catalog, namespace, name),
        )
        if not rows or rows[0][0] is None:
            return _error(
                HTTPStatus.NOT_FOUND, "NoSuchTableException", f"no table {namespace}.{name}"
            )
        if head:
            return Reply(HTTPStatus.NO_CONTENT)
        location = str(rows[0][0])
        return Reply(
            HTTPStatus.OK,
            {"metadata-location": location, "metadata": self._read(location), "config": {}},
        )

    def _read(self, location: str) -> dict[str, Any]:
        with self._lock:
            if location in self._metadata:
                self._metadata.move_to_end(location)
                return self._metadata[location]
        with load_file_io(self.io_properties, location).new_input(location).open() as stream:
            metadata: dict[str, Any] = json.loads(stream.read())
        with self._lock:
            self._metadata[location] = metadata
            while len(self._metadata) > METADATA_CACHED:
                self._metadata.popitem(last=False)
        return metadata


class RestServer:
    """The catalog on an HTTP server of its own, served from a daemon thread."""

    def __init__(self, catalog: RestCatalog, host: str, port: int) -> None:
        self.httpd = ThreadingHTTPServer((host, port), _handler_for(catalog))
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> RestServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler_for(catalog: RestCatalog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(head=False)

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def _refuse(self) -> None:
            self._send(
                _error(
                    HTTPStatus.METHOD_NOT_ALLOWED,
                    "BadRequestException",
                    "this catalog is read-only: Firn publishes its tables",
                )
            )

        do_POST = do_PUT = do_DELETE = _refuse

        def _answer(self, head: bool) -> None:
            try:
                reply = catalog.get(self.path, head=head)
            except Exception as exc:  # the request fails, the server serves on
                log.exception("Iceberg REST request %s failed", self.path)
                reply = _error(HTTPStatus.SERVICE_UNAVAILABLE, type(exc).__name__, str(exc))
            self._send(reply, head)

        def _send(self, reply: Reply, head: bool = False) -> None:
            body = b"" if reply.body is None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            if reply.body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head and body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


def serve(settings: FirnSettings, port: int | None = None) -> RestServer:
    """Start the REST catalog for ``settings`` (its port, or ``port``; 0: a free one)."""
    catalog = RestCatalog(
        lambda: connect(settings, autocommit=True),
        settings.iceberg_catalog,
        io_properties(settings),
    )
    chosen = settings.iceberg_rest_port if port is None else port
    return RestServer(catalog, settings.iceberg_rest_host, chosen).start()
