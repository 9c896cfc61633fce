"""The local stack: Postgres and Kafka on loopback, in one project-owned home.

``LocalStack`` is used three ways with the same code: by ``firn up`` (persistent data,
fixed ports), by the test fixtures (a fresh home and free ports per test session), and
by CI through the tests. A dependency given in the settings (``FIRN_DATABASE_URL``,
``FIRN_KAFKA_BOOTSTRAP``) is used as it is and not started.

Home layout::

    <home>/cache/         Maven, the Kafka jars (downloaded once, shared)
    <home>/postgres/      data directory and server log
    <home>/kafka/         KRaft storage, config and broker log; with ``secure_kafka``
                          also one ``<role>.env`` per Kafka principal (0600)
    <home>/logs/          one log per service process
    <home>/stack.json     what is running now: addresses and process ids
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from firn.errors import StackError
from firn.settings import FirnSettings

from .kafka import KAFKA_VERSION, KafkaBroker
from .kafka_security import BrokerSecurity, kafka_logins
from .postgres import PostgresServer
from .private_files import write_private

log = logging.getLogger(__name__)


@dataclass
class LocalStack:
    """Start what is not given, in order; stop what was started."""

    home: Path
    kafka_port: int = 0
    postgres_port: int = 0
    database_url: str | None = None
    kafka_bootstrap: str | None = None
    cache: Path | None = None
    secure_kafka: bool = False
    """Run the broker with SASL over TLS and ACLs, each principal with a login of its own."""
    kafka: KafkaBroker | None = field(default=None, init=False)
    kafka_logins: dict[str, dict[str, str]] = field(default_factory=dict, init=False)
    """With ``secure_kafka``: each Firn role's FIRN_KAFKA_ variables (``kafka_logins``)."""
    postgres: PostgresServer | None = field(default=None, init=False)
    timings: dict[str, float] = field(default_factory=dict, init=False)

    @property
    def cache_dir(self) -> Path:
        return self.cache or self.home / "cache"

    @property
    def state_file(self) -> Path:
        return self.home / "stack.json"

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            if self.database_url is None:
                began = time.monotonic()
                self.postgres = PostgresServer(
                    self.home / "postgres" / "data", port=self.postgres_port
                )
                self.postgres.start()
                self.database_url = self.postgres.url
                self.timings["postgres"] = time.monotonic() - began
            if self.kafka_bootstrap is None:
                began = time.monotonic()
                controller = self.kafka_port + 1 if self.kafka_port else 0
                security = None
                if self.secure_kafka:
                    # One CA for the stack: Postgres's when it runs here.
                    tls = self.postgres.tls_dir if self.postgres else self.home / "tls"
                    security = BrokerSecurity.create(tls)
                self.kafka = KafkaBroker(
                    self.cache_dir,
                    self.home / "kafka",
                    port=self.kafka_port,
                    controller_port=controller,
                    security=security,
                )
                self.kafka.start()
                self.kafka_bootstrap = self.kafka.bootstrap
                if security is not None:
                    self.kafka_logins = kafka_logins(
                        self.kafka_bootstrap, security, self.home / "kafka"
                    )
                self.timings["kafka"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        self.write_state(supervisor=os.getpid(), services={})

    def stop(self) -> None:
        """Kafka and Postgres at once: neither needs the other to shut down, and each
        waits up to its own timeout before it is killed, so stopping one after the other
        could take both timeouts end to end (a Ctrl-C that seems to hang)."""
        started = [s for s in (self.kafka, self.postgres) if s is not None]
        if started:
            with ThreadPoolExecutor(len(started), thread_name_prefix="firn-stop") as pool:
                for stopping in [pool.submit(_stop_timed, s) for s in started]:
                    stopping.result()
        self.kafka = None
        self.postgres = None
        self.state_file.unlink(missing_ok=True)

    def environment(self) -> dict[str, str]:
        """The FIRN_ variables that point a process at this stack."""
        if self.database_url is None or self.kafka_bootstrap is None:
            raise StackError("the stack is not started")
        return {
            "FIRN_DATABASE_URL": self.database_url,
            "FIRN_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
        }

    def login(self, role: str) -> dict[str, str]:
        """The FIRN_KAFKA_ variables of ``role``'s Kafka principal (none when the broker
        takes anyone)."""
        return dict(self.kafka_logins.get(role, {}))

    def apply_to(self, settings: FirnSettings, role: str = "producer") -> FirnSettings:
        """``settings`` pointed at this stack's Postgres and Kafka, logging in to Kafka
        as ``role`` when the broker asks who is there."""
        env = self.environment()
        update: dict[str, Any] = {
            "database_url": SecretStr(env["FIRN_DATABASE_URL"]),
            "kafka_bootstrap": env["FIRN_KAFKA_BOOTSTRAP"],
        }
        login = self.login(role)
        if login:
            update["kafka_config"] = json.loads(login["FIRN_KAFKA_CONFIG"])
            update["kafka_sasl_password"] = SecretStr(login["FIRN_KAFKA_SASL_PASSWORD"])
        return settings.model_copy(update=update)

    def write_state(self, *, supervisor: int, services: dict[str, int]) -> None:
        state: dict[str, Any] = {
            "supervisor_pid": supervisor,
            "database_url": self.database_url,
            "kafka_bootstrap": self.kafka_bootstrap,
            "kafka_version": KAFKA_VERSION,
            "pids": {
                **({"postgres": self.postgres.pid} if self.postgres else {}),
                **({"kafka": self.kafka.pid} if self.kafka else {}),
                **services,
            },
        }
        # It holds the catalog admin's password: readable by its owner only.
        write_private(self.state_file, json.dumps(state, indent=2) + "\n")


def read_state(home: Path) -> dict[str, Any] | None:
    """The state a running ``firn up`` left in ``home``, or None."""
    path = home / "stack.json"
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded
    except (OSError, ValueError):
        return None


def _stop_timed(server: KafkaBroker | PostgresServer) -> None:
    began = time.monotonic()
    server.stop()
    log.info("%s stopped in %.1fs", type(server).__name__, time.monotonic() - began)
