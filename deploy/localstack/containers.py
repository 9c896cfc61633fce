"""Firn's whole stack as testcontainers, for a user's own integration tests.

``firn_containers()`` starts Postgres, a Kafka broker and the five services (Firn's
image, ``firn:dev`` by default: ``docker compose build`` or ``make images`` makes
it) on a Docker network of their own, and yields a ``FirnContainers`` whose
``settings`` reach them from the host::

    with firn_containers() as stack:
        catalog = firn.connect(settings=stack.settings)

The warehouse is a host directory mounted at the same path in every container, so
the paths the catalog records are paths the test process can read too. Images come
from ``FIRN_POSTGRES_IMAGE``, ``FIRN_KAFKA_IMAGE`` and ``FIRN_IMAGE`` (the official
Postgres and Kafka images by default); testcontainers itself is a test dependency,
imported only here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from pydantic import SecretStr

from firn.errors import StackError
from firn.settings import FirnSettings

from .kafka import KAFKA_VERSION
from .processes import free_port

SERVICES = ("metrics", "planner", "dispatcher", "committer", "publisher")
_USER = "firn"
_START_TIMEOUT = 120


@dataclass
class FirnContainers:
    """The running stack: settings for the host, and the services' containers."""

    settings: FirnSettings
    services: dict[str, Any] = field(default_factory=dict)
    """Service name -> its testcontainers ``DockerContainer``."""

    def logs(self, tail: int = 40) -> str:
        """The last ``tail`` lines each service logged (for a failing test's message)."""
        parts = []
        for name, container in self.services.items():
            out, err = container.get_logs()
            lines = (out + err).decode(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def assert_running(self) -> None:
        """Fail with the service's log if one of them has exited."""
        for name, container in self.services.items():
            wrapped = container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status != "running":
                raise StackError(f"the {name} container is {wrapped.status}:\n{self.logs()}")


@contextlib.contextmanager
def firn_containers(
    services: Sequence[str] = SERVICES, warehouse: Path | None = None
) -> Iterator[FirnContainers]:
    """Postgres, Kafka and ``services`` as containers, stopped and removed on exit."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    postgres_image = os.environ.get("FIRN_POSTGRES_IMAGE") or "postgres:16"
    kafka_image = os.environ.get("FIRN_KAFKA_IMAGE") or f"apache/kafka:{KAFKA_VERSION}"
    firn_image = os.environ.get("FIRN_IMAGE") or "firn:dev"
    with contextlib.ExitStack() as stack:
        if warehouse is None:
            warehouse = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="firn-")))
        network = stack.enter_context(Network())
        postgres = stack.enter_context(
            DockerContainer(postgres_image)
            .with_network(network)
            .with_network_aliases("postgres")
            .with_env("POSTGRES_USER", _USER)
            .with_env("POSTGRES_PASSWORD", _USER)
            .with_env("POSTGRES_DB", _USER)
            .with_exposed_ports(5432)
        )
        host = postgres.get_container_host_ip()
        url = f"postgresql://{_USER}:{_USER}@{host}:{postgres.get_exposed_port(5432)}/{_USER}"
        _wait_for_postgres(url)
        # The broker advertises two listeners: kafka:9092 to the services on the
        # network, localhost:<port> (mapped one-to-one) to the host.
        port = free_port()
        kafka = (
            DockerContainer(kafka_image)
            .with_network(network)
            .with_network_aliases("kafka")
            .with_bind_ports(port, port)
            .with_env("KAFKA_NODE_ID", "1")
            .with_env("KAFKA_PROCESS_ROLES", "broker,controller")
            .with_env("KAFKA_LISTENERS", f"PLAINTEXT://:9092,CONTROLLER://:9093,HOST://:{port}")
            .with_env(
                "KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://kafka:9092,HOST://localhost:{port}"
            )
            .with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
            .with_env(
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,HOST:PLAINTEXT",
            )
            .with_env("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT")
            .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
            .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
            .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
            .waiting_for(
                LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(_START_TIMEOUT)
            )
        )
        stack.enter_context(kafka)
        running = FirnContainers(
            FirnSettings(
                database_url=SecretStr(url),
                kafka_bootstrap=f"localhost:{port}",
                warehouse=str(warehouse),
            )
        )
        for name in services:
            service = (
                DockerContainer(firn_image)
                .with_network(network)
                .with_command(["service", name])
                .with_env(
                    "FIRN_DATABASE_URL", f"postgresql://{_USER}:{_USER}@postgres:5432/{_USER}"
                )
                .with_env("FIRN_KAFKA_BOOTSTRAP", "kafka:9092")
                .with_env("FIRN_WAREHOUSE", str(warehouse))
                .with_volume_mapping(str(warehouse), str(warehouse), "rw")
                .waiting_for(
                    LogMessageWaitStrategy(f"{name} started as").with_startup_timeout(
                        _START_TIMEOUT
                    )
                )
            )
            running.services[name] = stack.enter_context(service)
        yield running


def _wait_for_postgres(url: str) -> None:
    """Until Postgres takes a connection (the official image restarts once after its
    first initialisation, so its log line is not enough)."""
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        try:
            with psycopg.connect(url, connect_timeout=5):
                return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise StackError(f"Postgres did not come up at {url}: {exc}") from exc
            time.sleep(0.5)
