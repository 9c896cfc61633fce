"""What the benchmarks share: best-of-N timing, a catalog (``FIRN_DATABASE_URL``
when set, else a throwaway local Postgres under ``.firn/bench-*``, started and
removed by the benchmark), a throwaway home for a whole `firn up` stack, and the
orders table the load, merge and scale benchmarks generate."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import SecretStr

import firn
from firn.catalog.files import files_at, merged_seqs_at
from firn.engine.policies import plan
from firn.model.tasks import TaskSpec
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


def status_bytes(field: str) -> int:
    """A ``kB`` field of /proc/self/status, in bytes: ``VmHWM`` is this process's own
    peak resident set. Not ``ru_maxrss``, which Linux carries over from the parent
    across fork+exec, so a child would report the parent's peak when it is higher."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def one_task(table: firn.Table) -> TaskSpec:
    """The planner's single major task over a whole unpartitioned table (one base and
    one change node), as ``create_plan`` makes it (made-up plan and task ids)."""
    conn = table.catalog.conn
    snapshot = table.current_snapshot()
    entries = files_at(conn, table.table_id, snapshot)
    merged = merged_seqs_at(conn, table.table_id, snapshot).get("", 0)
    draft = plan(table.definition, table.properties, "", merged, entries, "major")
    if draft is None or len(draft.tasks) != 1:
        raise SystemExit(f"expected one task over the whole table, got {draft}")
    return draft.task_spec(
        draft.tasks[0],
        plan_id=0,
        task_id=0,
        table_id=table.table_id,
        location=table.location,
        target_file_size=table.properties.target_file_size,
        definition=table.definition,
    )


def child_report(script: str, *args: str) -> dict[str, Any]:
    """Run ``script --child args`` in a fresh Python process (its memory its own) and
    return the JSON object it prints last."""
    out = subprocess.run(
        [sys.executable, script, "--child", *args], check=True, capture_output=True, text=True
    )
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


@contextlib.contextmanager
def bench_catalog() -> Iterator[firn.Catalog]:
    home = bench_root() / f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
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


def bench_root() -> Path:
    """Where benchmarks put their throwaway homes: ``FIRN_BENCH_DIR`` when set, else
    ``.firn/`` in the repository. On ext4 a directory whose inode groups saw many
    files deleted lately makes every file created in it scan those inodes
    (``recently_deleted`` in the kernel's inode allocator: 0.6-0.8 ms a file against
    20-50 us, measured with perf on this machine's ``.firn/`` after a day of
    benchmarks); a commit creates several files, so such a directory measures the
    disk's history, not Firn. Point this elsewhere then."""
    root = Path(os.environ.get("FIRN_BENCH_DIR") or REPO / ".firn")
    root.mkdir(parents=True, exist_ok=True)
    return root


SLOW_CREATE_US = 60.0
"""Above this a file's creation is the disk's history talking (``bench_root``)."""


def file_create_us(directory: Path, files: int = 200) -> float:
    """Microseconds to create, write 3 KB to and close one file in ``directory`` (the
    median of ``files``; they are removed). A fleet commit creates about eight files,
    so this is worth printing beside any commit latency measured there."""
    probe = Path(tempfile.mkdtemp(prefix="create-probe-", dir=directory))
    took = []
    try:
        for i in range(files):
            began = time.perf_counter()
            with open(probe / f"{i}.parquet", "wb") as out:
                out.write(b"x" * 3000)
            took.append(time.perf_counter() - began)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return round(sorted(took)[len(took) // 2] * 1e6, 1)


def stack_home(prefix: str) -> tuple[Path, dict[str, str]]:
    """A fresh home under ``bench_root()`` for `firn up`, and the environment that
    points the stack at it (its own warehouse, free ports); the caller removes the home."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir=bench_root()))
    home.chmod(0o755)  # the local Postgres runs as the `postgres` user
    env = {
        **os.environ,
        "FIRN_HOME": str(home),
        "FIRN_WAREHOUSE": str(home / "warehouse"),
        "FIRN_POSTGRES_PORT": "0",
        "FIRN_KAFKA_PORT": "0",
    }
    return home, env


ORDERS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("price", pa.float64()),
        pa.field("label", pa.string()),
        pa.field("ts", pa.timestamp("us")),
    ]
)
"""The keyed table the load, merge and scale benchmarks share: an int64 key, an
int64, a float64, a 16-character string and a timestamp."""
T0 = 1_700_000_000_000_000  # 2023-11-14, in microseconds
YEAR_US = 365 * 86_400 * 1_000_000
ORDER_CHUNK_ROWS = 10_000_000
"""Rows per chunk of ``order_rows`` (a 50M-row string column would pass a 32-bit
string array's 2 GiB)."""


def order_rows(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    """``ORDERS`` rows of the keys ``ids`` with random values, in chunks of
    ``ORDER_CHUNK_ROWS``."""
    if len(ids) > ORDER_CHUNK_ROWS:
        step = ORDER_CHUNK_ROWS
        return pa.concat_tables(
            [order_rows(rng, ids[s : s + step]) for s in range(0, len(ids), step)]
        )
    n = len(ids)
    digits = pc.cast(pa.array(rng.integers(0, 10**11, n)), pa.string())
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "qty": pa.array(rng.integers(0, 1_000_000, n)),
            "price": pa.array(rng.random(n) * 1000),
            "label": pc.binary_join_element_wise("item-", pc.utf8_lpad(digits, 11, "0"), ""),
            "ts": pa.array(T0 + rng.integers(0, YEAR_US, n), pa.timestamp("us")),
        },
        schema=ORDERS,
    )
