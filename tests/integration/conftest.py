"""Session-scoped real Kafka, Postgres and Spark standalone cluster, and per-test
settings with unique names."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from pydantic import SecretStr

import firn
from firn.postgres import connect
from firn.postgres.connection import Connection
from firn.postgres.urls import masked
from firn.settings import FirnSettings
from firn_localstack import SparkCluster, worker_venv
from tests.integration.backends import Backend, kafka_backend, postgres_backend

REPO = Path(__file__).resolve().parents[2]

# As in an activated virtualenv: `python3` on the PATH is this interpreter, which has
# Firn. Spark starts a Python data source's driver-side workers (the firn writer's
# catalog steps) as `python3` from the PATH its JVM had when it started, the first
# time any test used Spark; a cluster's workers have their own PATH
# (firn_localstack.SparkCluster), so they still lack Firn.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def base_settings() -> FirnSettings:
    return FirnSettings()


@pytest.fixture(scope="session")
def stack_home() -> Iterator[Path]:
    """A fresh stack home per session, inside the repo's .firn so that the Postgres
    system user can reach it (pytest's own temp dirs are private to root)."""
    home = REPO / ".firn" / f"test-stack-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    home.mkdir(parents=True)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka(base_settings: FirnSettings, stack_home: Path) -> Iterator[Backend]:
    with kafka_backend(
        base_settings.kafka_bootstrap, stack_home, cache=REPO / ".firn" / "cache"
    ) as backend:
        _USED["Kafka"] = expected_backend("Kafka", backend)
        yield backend


@pytest.fixture(scope="session")
def postgres(base_settings: FirnSettings, stack_home: Path) -> Iterator[Backend]:
    url = base_settings.database_url.get_secret_value() if base_settings.database_url else None
    with postgres_backend(url, stack_home) as backend:
        with psycopg.connect(backend.address) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        _USED["Postgres"] = Backend(
            backend.address, f"{backend.source}, server {version[0] if version else '?'}"
        )
        expected_backend("Postgres", backend)
        yield backend


@pytest.fixture(scope="session")
def spark_cluster(stack_home: Path) -> Iterator[SparkCluster]:
    """A Spark standalone master and one small worker (pyspark's own spark-class),
    whose executors run a Python that has pyarrow and numpy but no Firn."""
    python = worker_venv(REPO / ".firn" / "cache")
    cluster = SparkCluster(stack_home / "spark", python=python, cores=1, memory="1g")
    cluster.start()
    _USED["Spark cluster"] = Backend(
        cluster.master_url, f"local runner (pyspark's spark-class), worker Python {python}"
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@contextmanager
def private_settings(
    base_settings: FirnSettings, kafka_address: str, postgres: Backend, unique: str
) -> Iterator[FirnSettings]:
    """Settings on these backends with a schema and topics of their own; the schema
    is dropped afterwards."""
    schema = f"test_{unique}"
    yield base_settings.model_copy(
        update={
            "database_url": SecretStr(postgres.address),
            "kafka_bootstrap": kafka_address,
            "database_schema": schema,
            "topic_prefix": f"test-{unique}.",
        }
    )
    with psycopg.connect(postgres.address, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def settings(
    base_settings: FirnSettings, kafka: Backend, postgres: Backend, unique: str
) -> Iterator[FirnSettings]:
    """Settings pointed at the real backends, with a schema and topics of this test's own."""
    with private_settings(base_settings, kafka.address, postgres, unique) as settings:
        yield settings


@pytest.fixture
def as_a_user(settings: FirnSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The FIRN_ variables a user's process would have for this test's stack (and its
    child processes, which inherit them), with a warehouse in ``tmp_path``, returned:
    for the documentation's examples, which call ``firn.connect()`` with nothing."""
    for name, value in {
        "FIRN_DATABASE_URL": settings.database_dsn(),
        "FIRN_DATABASE_SCHEMA": settings.database_schema,
        "FIRN_KAFKA_BOOTSTRAP": settings.kafka_servers(),
        "FIRN_TOPIC_PREFIX": settings.topic_prefix,
        "FIRN_WAREHOUSE": str(tmp_path),
    }.items():
        monkeypatch.setenv(name, value)
    return tmp_path


@pytest.fixture
def stack_settings(settings: FirnSettings, tmp_path: Path) -> FirnSettings:
    """The test's settings with a warehouse and home of its own, shared with the
    service processes it starts."""
    return settings.model_copy(
        update={"warehouse": str(tmp_path / "warehouse"), "home": tmp_path / "home"}
    )


@pytest.fixture
def shared_catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    """One catalog for every hypothesis example of a test (hence the suppressed
    function-scoped-fixture health check); each example makes its own table."""
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


@pytest.fixture
def cli_settings(
    settings: FirnSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> FirnSettings:
    """The CLI reads its settings from the environment, as it does for a user."""
    monkeypatch.setenv("FIRN_DATABASE_URL", settings.database_dsn())
    monkeypatch.setenv("FIRN_DATABASE_SCHEMA", settings.database_schema)
    monkeypatch.setenv("FIRN_KAFKA_BOOTSTRAP", settings.kafka_servers())
    monkeypatch.setenv("FIRN_TOPIC_PREFIX", settings.topic_prefix)
    monkeypatch.setenv("FIRN_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("FIRN_HOME", str(tmp_path / "home"))
    return settings.model_copy(update={"warehouse": str(tmp_path / "warehouse")})


@pytest.fixture
def db(settings: FirnSettings) -> Iterator[Connection]:
    conn = connect(settings)
    yield conn
    conn.close()


_USED: dict[str, Backend] = {}


def expected_backend(name: str, backend: Backend) -> Backend:
    """``backend``, if it is of the kind ``FIRN_TEST_BACKEND`` asks for (CI sets
    ``testcontainers``): a run meant for containers that fell back to the local
    runner, because Docker did not answer, fails instead of passing on other parts."""
    wanted = os.environ.get("FIRN_TEST_BACKEND")
    assert not wanted or backend.source.startswith(wanted), (
        f"{name} came from {backend.source}, but FIRN_TEST_BACKEND asks for {wanted}"
    )
    return backend


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which real backends the integration tests ran against."""
    for name, backend in _USED.items():
        shown = masked(backend.address) if name == "Postgres" else backend.address
        terminalreporter.write_line(f"firn: {name} at {shown} via {backend.source}")
