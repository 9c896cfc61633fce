"""The web dashboard: server-side HTML over the standard library's HTTP server.

Read-only but for one action, requesting a compaction (``POST /compact``). With
``FIRN_DASHBOARD_OPERATORS`` it asks for a Postgres login and takes it only from a
member of ``firn_operator`` (or of the catalog's owner): the dashboard logs in as
that role to check the password and the membership, so Postgres decides who may
ask. Otherwise it needs ``FIRN_DASHBOARD_TOKEN``; with neither, the action is
disabled. A wrong token, login or role: 403.

A page never takes the server down. The catalog is opened on the first request and
every reading runs under ``statement_timeout`` (``FIRN_DASHBOARD_TIMEOUT``); when a
reading fails (Postgres down, restarting, or too slow) the page answers 503 with the
error, the catalog is closed, and the next request opens it again (any other
failure is a bug: that page answers 500, and the server serves on). Requests are
served one at a time against the one catalog (a Catalog is not thread-safe); the
timeout bounds how long one can hold the others up.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import psycopg

from firn.api.catalog import Catalog, connect
from firn.api.table import Table
from firn.dashboard import pages, views
from firn.errors import ConfigError, FirnError
from firn.postgres.urls import url_as
from firn.settings import FirnSettings

log = logging.getLogger(__name__)

MAX_FORM_BYTES = 64 * 1024


class Answer(Protocol):
    """What a compaction request answers (``firn.commands.output.Output``)."""

    @property
    def error(self) -> str | None: ...

    def plain(self) -> str: ...


Requester = Callable[[FirnSettings, Table, str | None, str], Answer]
"""How the action requests a compaction of (settings, table, partition or None,
kind): ``firn compact``'s own request, handed in by ``firn dashboard``."""


@dataclass(frozen=True)
class Response:
    status: int
    html: str


class Dashboard:
    """Routes, the token check and the catalog's life; no HTTP plumbing (tests call
    ``get`` and ``post`` directly)."""

    def __init__(
        self,
        settings: FirnSettings,
        *,
        open_catalog: Callable[[], Catalog] | None = None,
        request: Requester,
    ) -> None:
        self.settings = settings
        self._open = open_catalog or (lambda: connect(settings=settings))
        self._request = request
        self._catalog: Catalog | None = None
        self._lock = threading.Lock()

    @property
    def action_enabled(self) -> bool:
        token = self.settings.dashboard_token
        return self.settings.dashboard_operators or (
            token is not None and token.get_secret_value() != ""
        )

    def get(self, target: str) -> Response:
        url = urlsplit(target)
        query = parse_qs(url.query)
        if url.path == "/":
            return self._read(views.overview)
        if url.path == "/table" and query.get("name"):
            name = query["name"][0]
            enabled, login = self.action_enabled, self.settings.dashboard_operators
            return self._read(
                lambda c: views.table_view(c, name, action_enabled=enabled, login=login)
            )
        return _error(HTTPStatus.NOT_FOUND, f"no page {url.path}")

    def post(self, target: str, form: dict[str, str], authorization: str = "") -> Response:
        if urlsplit(target).path != "/compact":
            return _error(HTTPStatus.NOT_FOUND, f"no action {urlsplit(target).path}")
        if not self.action_enabled:
            return _error(
                HTTPStatus.FORBIDDEN,
                "actions are disabled: set FIRN_DASHBOARD_OPERATORS or FIRN_DASHBOARD_TOKEN",
            )
        if self.settings.dashboard_operators:
            refused = self._operator_refusal(form.get("role", ""), form.get("password", ""))
            if refused is not None:
                return _error(HTTPStatus.FORBIDDEN, refused)
            who = f"role {form['role']}"
        else:
            given = form.get("token") or authorization.removeprefix("Bearer ").strip()
            if not self._token_matches(given):
                return _error(HTTPStatus.FORBIDDEN, "missing or wrong token")
            who = "the token's holder"
        name, kind = form.get("table", ""), form.get("kind", "major")
        if not name or kind not in pages.KINDS:
            return _error(HTTPStatus.BAD_REQUEST, "a table and a kind (major, full, minor, auto)")
        partition = form.get("partition") or None

        def act(catalog: Catalog) -> str:
            try:
                table = catalog.table(name)
                output = self._request(self.settings, table, partition, kind)
            except ConfigError as exc:
                raise views.PageNotFound(str(exc)) from exc
            text = output.plain() if output.error is None else f"{output.plain()}\n{output.error}"
            log.info("compaction of %s (%s) requested by %s", name, kind, who)
            return pages.action_page(output.error is None, text)

        return self._read(act)

    def _operator_refusal(self, role: str, password: str) -> str | None:
        """None when ``role`` logs in with ``password`` and may ask for compactions;
        else why not, without saying which of the two was wrong."""
        if not role or not password:
            return "a role and its password are needed"
        try:
            url = url_as(self.settings.database_dsn(), role, password)
            with psycopg.connect(
                url, connect_timeout=max(2, int(self.settings.dashboard_timeout))
            ) as conn:
                row = conn.execute(
                    "SELECT pg_has_role(current_user, 'firn_operator', 'MEMBER') "
                    "OR pg_has_role(current_user, n.nspowner, 'MEMBER') "
                    "FROM pg_namespace n WHERE n.nspname = %s",
                    (self.settings.database_schema,),
                ).fetchone()
        except (psycopg.Error, ConfigError):
            log.warning("dashboard: a compaction request as role %r was refused", role)
            return "wrong role or password"
        if not (row and row[0]):
            log.warning("dashboard: role %r may not request compactions", role)
            return f"role {role} may not request compactions (it is not in firn_operator)"
        return None

    def _token_matches(self, given: str) -> bool:
        token = self.settings.dashboard_token
        if token is None or not given:
            return False
        return hmac.compare_digest(given.encode(), token.get_secret_value().encode())

    def _read(self, render: Callable[[Catalog], str]) -> Response:
        with self._lock:
            try:
                catalog = self._catalog_with_timeout()
                return Response(HTTPStatus.OK, render(catalog))
            except views.PageNotFound as exc:
                return _error(HTTPStatus.NOT_FOUND, str(exc))
            except (FirnError, psycopg.Error) as exc:
                log.warning("dashboard page failed; reopening the catalog next time: %r", exc)
                self._drop_catalog()
                what = str(exc) if isinstance(exc, FirnError) else f"{type(exc).__name__}: {exc}"
                return _error(HTTPStatus.SERVICE_UNAVAILABLE, f"the catalog is unavailable: {what}")
            except Exception as exc:  # a bug: this page fails, the server serves on
                log.exception("dashboard page failed")
                self._drop_catalog()
                return _error(
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                    f"the page failed: {type(exc).__name__}: {exc}",
                )

    def _catalog_with_timeout(self) -> Catalog:
        if self._catalog is None:
            self._catalog = self._open()
        millis = int(self.settings.dashboard_timeout * 1000)
        self._catalog.conn.execute(
            "SELECT set_config('statement_timeout', %s, false)", (str(millis),)
        )
        return self._catalog

    def _drop_catalog(self) -> None:
        catalog, self._catalog = self._catalog, None
        if catalog is not None:
            try:
                catalog.close()
            except Exception as exc:  # closing a broken connection may fail too
                log.debug("closing the dashboard's catalog failed: %r", exc)

    def close(self) -> None:
        with self._lock:
            self._drop_catalog()


def _error(status: HTTPStatus, message: str) -> Response:
    return Response(status, pages.error_page(status, message))


class DashboardServer:
    """The dashboard served over HTTP from a daemon thread."""

    def __init__(self, dashboard: Dashboard, host: str, port: int) -> None:
        self.dashboard = dashboard
        self._server = ThreadingHTTPServer((host, port), _handler_for(dashboard))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="firn-dashboard", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else str(host)
        return f"http://{shown}:{port}/"

    def start(self) -> DashboardServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self.dashboard.close()


def serve(settings: FirnSettings, request: Requester, port: int | None = None) -> DashboardServer:
    """Start the dashboard on ``settings.dashboard_host`` and ``port`` (default
    ``settings.dashboard_port``; 0: a free port), its action asking ``request``;
    ``stop()`` it when done."""
    chosen = settings.dashboard_port if port is None else port
    board = Dashboard(settings, request=request)
    return DashboardServer(board, settings.dashboard_host, chosen).start()


def _handler_for(dashboard: Dashboard) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "firn-dashboard"

        def do_GET(self) -> None:
            self._send(dashboard.get(self.path))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_FORM_BYTES:
                self._send(_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "form too large"))
                return
            body = self.rfile.read(length).decode("utf-8", errors="replace")
            form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
            authorization = self.headers.get("Authorization", "")
            self._send(dashboard.post(self.path, form, authorization))

        def _send(self, response: Response) -> None:
            data = response.html.encode()
            self.send_response(response.status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("dashboard: %s", format % args)

    return Handler
