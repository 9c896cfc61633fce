"""What the benchmarks share: best-of-N timing, a catalog (``FIRN_DATABASE_URL``
when set, else a throwaway local Postgres under ``.firn/bench-*``, started and
removed by the benchmark), and a throwaway home for a whole `firn up` stack."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import SecretStr

import firn
from firn.settings import FirnSettings
from firn_localstack import PostgresServer

REPO = Path(__file__).resolve().parents[1]


def best_of(runs: int, fn: Callable[[], object]) -> float:
    """The fastest of ``runs`` timings of ``fn``, in seconds (the least disturbed)."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


@contextlib.contextmanager
def bench_catalog() -> Iterator[firn.Catalog]:
    home = REPO / ".firn" / f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    home.mkdir(parents=True)
    server = None
    try:
        settings = FirnSettings(home=home, warehouse=str(home / "warehouse"))
        if settings.database_url is None:
            server = PostgresServer(home / "postgres" / "data")
            server.start()
            settings = settings.model_copy(update={"database_url": SecretStr(server.url)})
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        settings = settings.model_copy(update={"database_schema": schema, "kafka_bootstrap": None})
        with firn.connect(settings=settings) as catalog:
            try:
                yield catalog
            finally:
                catalog.conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(home, ignore_errors=True)


def stack_home(prefix: str) -> tuple[Path, dict[str, str]]:
    """A fresh home under ``.firn/`` for `firn up`, and the environment that points the
    stack at it (its own warehouse, free ports); the caller removes the home."""
    (REPO / ".firn").mkdir(exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix=prefix, dir=REPO / ".firn"))
    home.chmod(0o755)  # the local Postgres runs as the `postgres` user
    env = {
        **os.environ,
        "FIRN_HOME": str(home),
        "FIRN_WAREHOUSE": str(home / "warehouse"),
        "FIRN_POSTGRES_PORT": "0",
        "FIRN_KAFKA_PORT": "0",
    }
    return home, env
