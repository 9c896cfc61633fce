"""Commit-to-compacted latency, write amplification and the services' CPU and memory,
on the whole stack.

Runs `firn up --demo --json` (Postgres, Kafka, the four services, the synthetic CDC
producer) in a throwaway home for --duration seconds, then prints what the demo
measured: for each (commit, partition), the time from the commit to the first
compaction that merged it, and each service's CPU and peak RSS idle and under load.
The baseline in the same run is the producer's own commit interval: a latency of a
few intervals means compaction keeps pace with the writers.

    .venv/bin/python bench/latency.py --duration 120 --rate 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import stack_home  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of producing")
    parser.add_argument("--rate", type=float, default=2.0, help="commits per second")
    parser.add_argument("--batch", type=int, default=100, help="rows per commit")
    args = parser.parse_args()

    home, env = stack_home("bench-latency-")
    command = [
        str(REPO / ".venv" / "bin" / "firn"),
        "up",
        "--demo",
        "--json",
        f"--duration={args.duration:g}",
        f"--rate={args.rate:g}",
        f"--batch={args.batch}",
    ]
    print(f"running {' '.join(command[1:])} (home {home}) ...", file=sys.stderr)
    try:
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    summary = _summary(done.stdout)
    if summary is None:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    _report(summary, args.rate)
    return 0 if summary["ok"] else 1


def _summary(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "summary":
            return event
    return None


def _report(summary: dict[str, Any], rate: float) -> None:
    latency = summary["latency"]
    interval = 1 / rate
    print(
        f"{summary['commits']} commits in {summary['seconds']} s, "
        f"{sum(summary['compactions'].values())} compactions {summary['compactions']}, "
        "model check: "
        f"{'ok' if summary['model_check']['matches'] else 'MISMATCH'}"
    )
    if latency["compacted"]:
        print(
            f"commit to compacted over {latency['compacted']} (commit, partition) pairs: "
            f"median {latency['median_s']:.2f} s, p95 {latency['p95_s']:.2f} s, "
            f"max {latency['max_s']:.2f} s"
        )
        print(
            f"  = median {latency['median_s'] / interval:.1f}x, "
            f"p95 {latency['p95_s'] / interval:.1f}x the commit interval ({interval:.2f} s)"
        )
    written = summary["written"]
    if written["amplification"] is not None:
        print(
            f"written: {written['committed_bytes'] / 2**20:.1f} MiB committed, "
            f"{written['compacted_bytes'] / 2**20:.1f} MiB by compactions: "
            f"write amplification {written['amplification']:.2f}x"
        )
    print(f"{'process':<11} {'idle cores':>10} {'load cores':>10} {'peak RSS MiB':>13}")
    idle = (summary["resources"]["idle"] or {}).get("processes", {})
    load = (summary["resources"]["load"] or {}).get("processes", {})
    for name, used in load.items():
        idle_cores = idle.get(name, {}).get("cores", float("nan"))
        print(
            f"{name:<11} {idle_cores:>10.3f} {used['cores']:>10.3f} {used['peak_rss_mib']:>13.1f}"
        )


if __name__ == "__main__":
    sys.exit(main())
