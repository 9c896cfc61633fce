"""Serving a Prometheus registry over HTTP (``GET /metrics``) from a daemon thread.

A port that is taken does not stop the service: its work matters more than its
numbers, so the failure is logged and the service runs without an endpoint.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


@dataclass
class Endpoint:
    """A running ``/metrics`` server."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve(
    host: str, port: int, registry: CollectorRegistry = REGISTRY, *, what: str = "metrics"
) -> Endpoint | None:
    """Serve ``registry`` on ``host:port`` (port 0: a free one); None when the port
    cannot be bound."""
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("%s: cannot serve /metrics on %s:%d: %s", what, host, port, exc)
        return None
    endpoint = Endpoint(server, thread)
    log.info("%s: Prometheus metrics on %s", what, endpoint.url(host))
    return endpoint
