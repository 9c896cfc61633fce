"""Run Firn services as real OS processes (`python -m firn service NAME`) against a
test's settings, with their logs kept for the failure message."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

import firn
from firn.catalog.grants import service_login
from firn.postgres.urls import url_as
from firn.settings import FirnSettings

REPO = Path(__file__).resolve().parents[2]
SERVICE_NAMES = ("metrics", "planner", "dispatcher", "committer", "publisher")
SERVICE_PASSWORD = secrets.token_urlsafe(18)
"""Every service login's password for this test run: the same each time one is set,
so a stack started later never locks out the services of one still running."""


def service_urls(settings: FirnSettings) -> dict[str, str]:
    """Bring the test's catalog up to date as its admin and give each service its own
    login role, as ``firn up`` and compose do: the services run with the privileges a
    deployment gives them, so a missing grant fails the suites that use them."""
    with firn.connect(settings=settings) as catalog:
        admin_url = settings.database_dsn()
        return {
            name: url_as(
                admin_url, service_login(catalog.conn, name, SERVICE_PASSWORD), SERVICE_PASSWORD
            )
            for name in SERVICE_NAMES
        }


def service_env(settings: FirnSettings, **extra: str) -> dict[str, str]:
    """The environment that makes a child process use exactly ``settings``."""
    assert settings.database_url is not None
    assert settings.kafka_bootstrap is not None
    env = {
        **os.environ,
        "FIRN_DATABASE_URL": settings.database_url.get_secret_value(),
        "FIRN_DATABASE_SCHEMA": settings.database_schema,
        "FIRN_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "FIRN_TOPIC_PREFIX": settings.topic_prefix,
        "FIRN_TOPIC_PARTITIONS": str(settings.topic_partitions),
        "FIRN_TOPIC_REPLICATION": str(settings.topic_replication),
        "FIRN_KAFKA_CONFIG": json.dumps(settings.kafka_config),
        "FIRN_WAREHOUSE": settings.warehouse,
        "FIRN_HOME": str(settings.home),
        "FIRN_SERVICE_HEARTBEAT_SECONDS": "2",
        "FIRN_LOG_LEVEL": "INFO",
        # One Spark core per dispatcher: the machines that run these tests have two.
        "FIRN_SPARK_MASTER": "local[1]",
        # No /metrics servers: tests run several services (and stacks) side by side,
        # and the fixed default ports would be taken. test_prometheus.py serves them.
        **{f"FIRN_{name.upper()}_PROMETHEUS_PORT": "0" for name in SERVICE_NAMES},
    }
    if settings.topic_min_insync_replicas is not None:
        env["FIRN_TOPIC_MIN_INSYNC_REPLICAS"] = str(settings.topic_min_insync_replicas)
    env.update(extra)
    return env


class Services:
    """Named service processes: start, kill, restart; logs under ``log_dir``."""

    def __init__(
        self,
        settings: FirnSettings,
        log_dir: Path,
        env: Mapping[str, str],
        own: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """``own``: variables of one service over ``env`` (its own Kafka login)."""
        self.settings = settings
        self.log_dir = log_dir
        self.env = dict(service_env(settings, **env))
        self.own = {name: dict(variables) for name, variables in (own or {}).items()}
        self.urls = service_urls(settings) if "FIRN_DATABASE_URL" not in env else {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._starts: dict[str, int] = {}

    def start(self, name: str, service: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``service`` (default: ``name`` without a ``#n`` suffix) as ``name``."""
        service = service or name.split("#")[0]
        self._starts[name] = self._starts.get(name, 0) + 1
        log_path = self.log_dir / f"{name.replace('#', '-')}.{self._starts[name]}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "firn", "service", service],
                cwd=REPO,
                env={**self.env, **self._login(service), **self.own.get(service, {})},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs[name] = proc
        return proc

    def _login(self, service: str) -> dict[str, str]:
        url = self.urls.get(service)
        return {} if url is None else {"FIRN_DATABASE_URL": url}

    def kill(self, name: str) -> None:
        """kill -9: no chance to finish the message in hand or deregister."""
        proc = self.procs.pop(name)  # down on purpose until started again
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)

    def wait_for_group(self, service: str, members: int, timeout: float = 120.0) -> None:
        """Wait until ``service``'s consumer group is stable with ``members`` members,
        each holding a partition: work published before then all goes to whoever
        joined first (a Spark session takes seconds to start)."""
        admin = AdminClient({"bootstrap.servers": self.settings.kafka_bootstrap})
        group = f"{self.settings.topic_prefix}{service}"
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            self.assert_running()
            try:
                seen = admin.describe_consumer_groups([group], request_timeout=5)[group].result()
            except KafkaException:
                seen = None
            if (
                seen is not None
                and seen.state == ConsumerGroupState.STABLE
                and len(seen.members) == members
                and all(m.assignment.topic_partitions for m in seen.members)
            ):
                return
            time.sleep(0.5)
        state = None if seen is None else (seen.state, len(seen.members))
        raise AssertionError(
            f"group {group} not stable with {members} members after {timeout:.0f}s: {state}\n"
            f"{self.logs()}"
        )

    def assert_running(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        assert not dead, f"service(s) exited: {dead}\n{self.logs()}"

    def logs(self, tail: int = 40) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)


@contextmanager
def running_services(
    settings: FirnSettings,
    log_dir: Path,
    names: list[str],
    own: Mapping[str, Mapping[str, str]] | None = None,
    **env: str,
) -> Iterator[Services]:
    services = Services(settings, log_dir, env, own)
    try:
        for name in names:
            services.start(name)
        yield services
    finally:
        services.stop_all()
