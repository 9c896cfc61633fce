"""What one small commit costs, step by step, on an idle stack (issue 37).

Starts Postgres and Kafka with `firn up --no-services` in a throwaway home, creates a
keyed table partitioned four ways, and commits --commits change sets of --rows rows
spread over --partitions partitions through `Table.commit` (a major compaction
every --compact-every commits, so runs do not pile up as they would with no
services). Prints the commit's p50 and p95 and the same for each of its steps
(`Committed.phases`: validate, split, stage, write, register, announce,
back_pressure). The floor in the same run: the same rows in one partition.

    .venv/bin/python bench/commit.py --commits 300 --rows 200 --partitions 4

JSON on stdout; the goal is p95 under 50 ms for 200 rows over 4 partitions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
from harness import stack_home  # bench/ is on sys.path when run as a script

import firn
from firn.catalog.progress import percentile

REPO = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema(
    [
        pa.field("p", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("note", pa.string()),
    ]
)
WARM_UP = 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300, help="commits measured per case")
    parser.add_argument("--rows", type=int, default=200, help="rows per commit")
    parser.add_argument("--partitions", type=int, default=4, help="partitions a commit spans")
    parser.add_argument("--keys", type=int, default=2000, help="ids drawn from 0..KEYS-1")
    parser.add_argument("--compact-every", type=int, default=15, help="commits per compaction")
    args = parser.parse_args()

    home, env = stack_home("bench-commit-")
    env["FIRN_DASHBOARD_PORT"] = "0"
    stack = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "firn"), "up", "--no-services", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stack.stdout is not None
        report = json.loads(stack.stdout.readline())
        os.environ.update(
            FIRN_DATABASE_URL=report["database_url"],
            FIRN_KAFKA_BOOTSTRAP=report["kafka_bootstrap"],
            FIRN_WAREHOUSE=str(home / "warehouse"),
        )
        with firn.connect() as catalog:
            results = {
                "spread": measure(catalog, "bench.spread", args.partitions, args),
                "one_partition": measure(catalog, "bench.one", 1, args),
            }
    finally:
        stack.send_signal(signal.SIGINT)
        stack.wait(timeout=120)
        shutil.rmtree(home, ignore_errors=True)
    spread = results["spread"]["total_ms"]
    results["goal_p95_under_50ms"] = spread["p95"] < 50
    print(json.dumps(results, indent=2))
    return 0


def measure(catalog: firn.Catalog, name: str, partitions: int, args: Any) -> dict[str, Any]:
    table = catalog.create_table(name, SCHEMA, ["p", "id"], ["p"])
    rng = random.Random(7)
    totals: list[float] = []
    phases: dict[str, list[float]] = {}
    for n in range(WARM_UP + args.commits):
        ids = rng.sample(range(args.keys), args.rows)
        rows = pa.table(
            {
                "p": [f"p{i % partitions}" for i in ids],
                "id": ids,
                "v": ids,
                "note": [f"note {i}" for i in ids],
                "_op": ["U"] * args.rows,
            }
        )
        committed = table.commit(rows)
        if n >= WARM_UP:
            totals.append(sum(committed.phases.values()))
            for phase, seconds in committed.phases.items():
                phases.setdefault(phase, []).append(seconds)
        if n % args.compact_every == args.compact_every - 1:
            firn.compact(table, kind="major", engine="local")
    print(f"{name}: {args.commits} commits measured", file=sys.stderr)
    return {
        "partitions": partitions,
        "rows": args.rows,
        "total_ms": _summary(totals),
        "phases_ms": {phase: _summary(values) for phase, values in phases.items()},
    }


def _summary(seconds: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(seconds, 0.5) * 1000, 2),
        "p95": round(percentile(seconds, 0.95) * 1000, 2),
    }


if __name__ == "__main__":
    sys.exit(main())
