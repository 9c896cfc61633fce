"""The highest ingest rate the stack sustains with a flat backlog (issue 15).

Runs `bench/policy.py`'s workload (the whole stack under `firn up --demo`) once per
commit size in --batches, at --rate commits a second, and reports for each the rows
a second the producer reached, the backlog's verdict (flat: its slope over the second
half under 5 % of the ingest rate) and the read and write amplification and latency
that came with it. The answer is the highest rate reached with a flat backlog and
the model check passing. Bigger commits rather than more of them: the producer is one
Python thread, and its commit rate, not the row rate, is what it runs out of first.

    .venv/bin/python bench/sustained.py --batches 2000,5000,10000 --duration 120

JSON on stdout (and in --out), one line per run on stderr. Exits 1 when a run failed
or its table differed from the demo's model.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

from policy import WORKLOADS, RunOptions, run_workload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batches", default="2000,5000,10000", help="rows per commit, one run each"
    )
    parser.add_argument("--rate", type=float, default=10.0, help="commits per second asked for")
    parser.add_argument(
        "--duration", type=float, default=120.0, help="seconds of producing per run"
    )
    parser.add_argument("--workload", default="uniform", choices=list(WORKLOADS))
    parser.add_argument(
        "--keys", type=int, default=RunOptions.keys, help="key space (uniform, skewed)"
    )
    parser.add_argument(
        "--seed", type=int, default=RunOptions.seed, help="seed of the demo's workload"
    )
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a demo table property over the demo's own (as policy.py's); repeatable",
    )
    args = parser.parse_args()
    try:
        batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    except ValueError:
        parser.error(f"--batches takes whole numbers separated by commas, not {args.batches!r}")
    if not batches or batches[0] <= 0:
        parser.error("--batches needs at least one positive number of rows")

    runs = []
    for batch in batches:
        options = RunOptions(
            duration=args.duration,
            rate=args.rate,
            batch=batch,
            keys=args.keys,
            seed=args.seed,
            properties=tuple(args.property),
        )
        result = run_workload(args.workload, options)
        runs.append(_row(batch, args.rate, result))
        print(_line(runs[-1]), file=sys.stderr, flush=True)
    sustained = [r for r in runs if r["ok"] and r["backlog"] == "flat"]
    data = {
        "benchmark": "bench/sustained.py",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "workload": args.workload,
        "properties": args.property,
        "highest_flat_rows_per_s": max((r["rows_per_s"] for r in sustained), default=None),
        "runs": runs,
    }
    text = json.dumps(data, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0 if all(r["ok"] for r in runs) else 1


def _row(batch: int, rate: float, r: dict[str, Any]) -> dict[str, Any]:
    if "produced" not in r:
        return {
            "batch": batch,
            "asked_rows_per_s": round(batch * rate),
            "ok": False,
            "error": r.get("error"),
            "stderr": r.get("stderr", "")[-1000:],
        }
    ra, lat, b = r["read_amplification"], r["latency"], r["backlog"]
    return {
        "batch": batch,
        "asked_rows_per_s": round(batch * rate),
        "ok": r["ok"],
        "rows_per_s": r["produced"]["rows_per_s"],
        "backlog": b["verdict"],
        "backlog_slope_per_ingest": b["slope_per_ingest"],
        "write_amplification": r["write_amplification"]["total_per_committed"],
        "runs_per_node_mean": ra["mean_runs_over_time"],
        "runs_per_node_p95": ra["p95_runs_all_samples"],
        "latency_p95_s": lat["p95_s"],
        "engine_per_floor": r["compaction_throughput"]["engine_per_floor"],
        "loadavg": r["loadavg"],
    }


def _line(row: dict[str, Any]) -> str:
    if "rows_per_s" not in row:
        return f"batch {row['batch']}: FAILED ({row.get('error')})"
    return (
        f"batch {row['batch']}: {row['rows_per_s']:,} rows/s of {row['asked_rows_per_s']:,} "
        f"asked, backlog {row['backlog']} ({row['backlog_slope_per_ingest']:+.1%} of ingest), "
        f"write amplification {row['write_amplification']:.2f}x, runs per node mean "
        f"{row['runs_per_node_mean']} p95 {row['runs_per_node_p95']}, latency p95 "
        f"{row['latency_p95_s']}s, model {'ok' if row['ok'] else 'MISMATCH'}"
    )


if __name__ == "__main__":
    sys.exit(main())
