"""Where the integration tests find Kafka and Postgres.

Each is resolved on its own, in this order:

1. an address in the environment (``FIRN_KAFKA_BOOTSTRAP``, ``FIRN_DATABASE_URL``);
2. testcontainers, when a Docker daemon answers: the official ``apache/kafka`` and
   ``postgres`` images, or those named by ``FIRN_KAFKA_IMAGE`` and
   ``FIRN_POSTGRES_IMAGE`` (``deploy/images/build.sh`` makes ``firn/kafka`` and
   ``firn/postgres`` where Docker Hub is out of reach);
3. the project's own local runner (``deploy/localstack``): the official Kafka jars
   from Maven Central on Java 17, and the installed PostgreSQL binaries.

Nothing is ever skipped: if none of the three works the session fails and says why.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from firn_localstack import KAFKA_VERSION, KafkaBroker, PostgresServer
from firn_localstack.processes import free_port

log = logging.getLogger(__name__)


def postgres_image() -> str:
    return os.environ.get("FIRN_POSTGRES_IMAGE") or "postgres:16"


def kafka_image() -> str:
    return os.environ.get("FIRN_KAFKA_IMAGE") or f"apache/kafka:{KAFKA_VERSION}"


@dataclass(frozen=True)
class Backend:
    address: str
    source: str
    """'environment', 'testcontainers' or 'local runner': shown in the pytest header."""


@functools.cache
def docker_answers() -> bool:
    """Whether a Docker daemon answers ``GET /_ping`` on its socket (or DOCKER_HOST)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: str | tuple[str, int] = host.removeprefix("unix://")
        elif host.startswith("tcp://"):
            name, _, port = host.removeprefix("tcp://").partition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (name, int(port or 2375))
        else:
            return False
        with sock:
            sock.settimeout(3)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256)
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def kafka_backend(env_value: str | None, home: Path, cache: Path) -> Iterator[Backend]:
    if env_value:
        yield Backend(env_value, "environment")
    elif docker_answers():
        with kafka_container() as backend:
            yield backend
    else:
        with local_kafka(home, cache) as backend:
            yield backend


@contextlib.contextmanager
def postgres_backend(env_value: str | None, home: Path) -> Iterator[Backend]:
    if env_value:
        yield Backend(env_value, "environment")
    elif docker_answers():
        with postgres_container() as backend:
            yield backend
    else:
        with local_postgres(home) as backend:
            yield backend


@contextlib.contextmanager
def local_kafka(home: Path, cache: Path) -> Iterator[Backend]:
    broker = KafkaBroker(cache, home / "kafka")
    broker.start()
    try:
        yield Backend(broker.bootstrap, f"local runner (Apache Kafka {KAFKA_VERSION})")
    finally:
        broker.stop()


@contextlib.contextmanager
def local_postgres(home: Path) -> Iterator[Backend]:
    server = PostgresServer(home / "postgres" / "data")
    server.start()
    try:
        yield Backend(server.url, "local runner")
    finally:
        server.stop()


@contextlib.contextmanager
def kafka_container() -> Iterator[Backend]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    # The official image advertises the address it is given, so the host port is
    # mapped one-to-one and advertised as localhost.
    port, image = free_port(), kafka_image()
    container = (
        DockerContainer(image)
        .with_bind_ports(port, port)
        .with_env("KAFKA_NODE_ID", "1")
        .with_env("KAFKA_PROCESS_ROLES", "broker,controller")
        .with_env("KAFKA_LISTENERS", f"PLAINTEXT://:{port},CONTROLLER://:9093")
        .with_env("KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://localhost:{port}")
        .with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
        .with_env(
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        )
        .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
        .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
        .waiting_for(LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(120))
    )
    with container:
        yield Backend(f"localhost:{port}", f"testcontainers ({image})")


@contextlib.contextmanager
def postgres_container() -> Iterator[Backend]:
    from testcontainers.community.postgres import PostgresContainer

    image = postgres_image()
    with PostgresContainer(image, driver=None) as container:
        yield Backend(container.get_connection_url(), f"testcontainers ({image})")
