"""The compaction policy on the whole stack, per workload: write, read and space
amplification, backlog over time, commit-to-compacted latency, and compaction
throughput against a pyarrow read-merge-write floor.

For each workload it runs `firn up --demo --json` (Postgres, Kafka, the four
services, the demo producer) in a throwaway home for --duration seconds and reads
its JSON lines: one progress line a second (unmerged, live and base bytes, sorted
runs per node) and the summary (bytes committed and rewritten, latency, the bytes
compaction tasks read and the wall time they spent executing). Then, with the stack
down, it measures the floor: one pyarrow read-sort-dedup-write per task on the input
files of up to 300 of the run's own committed tasks (`policy_replay.py`), and, as
before 2026-11-26, on generated files like the mean task's (`policy_floor.py`). What
each number means is in `policy_report.py` and bench/README.md.

Workloads (the demo's --distribution): uniform (random order ids over --keys, 10 %
deletes: today's demo), ordered (new order ids in increasing order, 3 % late updates
of older orders, no deletes: an event log), appends (the same without late updates:
an insert-only log, where folds can move runs into base), skewed (90 % of upserts to 1 % of the
keys, 1 % deletes).

    .venv/bin/python bench/policy.py --duration 300 --workloads uniform --out policy.json

JSON on stdout (and in --out), a short summary per workload on stderr. Exits 1 when
a run failed or its table differed from the demo's model.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import stack_home
from policy_floor import measure_floor
from policy_replay import replay_floor
from policy_report import (
    SERIES_COLUMNS,
    backlog,
    parse_lines,
    read_amplification,
    series,
    space_amplification,
    write_amplification,
)

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20
WORKLOADS: dict[str, dict[str, Any]] = {
    "uniform": {"distribution": "uniform", "delete_ratio": 0.1},
    "ordered": {"distribution": "ordered", "delete_ratio": 0.0},
    "appends": {"distribution": "appends", "delete_ratio": 0.0},
    # Few deletes: at 10 % they would outpace the cold inserts (9 % of the rows) and
    # hold the table near 60k live rows, a base too small to say anything.
    "skewed": {"distribution": "skewed", "delete_ratio": 0.01},
}


@dataclass(frozen=True)
class RunOptions:
    """One run's load and table settings (``firn up --demo``'s options)."""

    duration: float = 300.0
    """Seconds of producing."""
    rate: float = 10.0
    """Commits per second asked for."""
    batch: int = 2000
    """Rows per commit."""
    keys: int = 2_000_000
    """Key space (uniform, skewed)."""
    seed: int = 15
    properties: tuple[str, ...] = ()
    """``KEY=VALUE`` demo table properties over the demo's own."""
    stall_wait: float | None = None
    """Seconds a commit waits for compaction at ``write.stall-runs``; None: never."""
    carry: bool = False
    """Rows fallen due while the producer is behind go into its next commit."""
    keep_home: bool = False
    """Keep the stack's home (logs, catalog) under .firn/ to look into."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--duration", type=float, default=RunOptions.duration, help="seconds of producing"
    )
    parser.add_argument("--rate", type=float, default=RunOptions.rate, help="commits per second")
    parser.add_argument("--batch", type=int, default=RunOptions.batch, help="rows per commit")
    parser.add_argument(
        "--keys", type=int, default=RunOptions.keys, help="key space (uniform, skewed)"
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {list(WORKLOADS)}"
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
        help="a demo table property over the demo's own (firn up --demo --property); repeatable",
    )
    parser.add_argument(
        "--stall-wait",
        type=float,
        metavar="SECONDS",
        help="the producer honours back-pressure (firn up --demo --stall-wait): a commit "
        "that finds a node at write.stall-runs waits up to this long for compaction",
    )
    parser.add_argument(
        "--carry",
        action="store_true",
        help="rows that fall due while the producer is behind go into its next commit "
        "(firn up --demo --carry), so a stall costs commit size, not rate",
    )
    parser.add_argument(
        "--keep-home",
        action="store_true",
        help="keep each run's stack home under .firn/ (services' logs, catalog) to look into",
    )
    args = parser.parse_args()
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or not names:
        parser.error(f"unknown workloads {unknown}; use some of {list(WORKLOADS)}")

    options = RunOptions(
        duration=args.duration,
        rate=args.rate,
        batch=args.batch,
        keys=args.keys,
        seed=args.seed,
        properties=tuple(args.property),
        stall_wait=args.stall_wait,
        carry=args.carry,
        keep_home=args.keep_home,
    )
    results = {}
    for name in names:
        _say(
            f"{name}: firn up --demo for {args.duration:g}s at {args.rate:g} commits/s "
            f"x {args.batch} rows ..."
        )
        results[name] = run_workload(name, options)
        _say(summary_line(name, results[name]))
    data = {
        "benchmark": "bench/policy.py",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "options": asdict(options),
        "workloads": results,
    }
    text = json.dumps(data, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0 if all(r["ok"] for r in results.values()) else 1


def run_workload(name: str, args: RunOptions) -> dict[str, Any]:
    spec = WORKLOADS[name]
    home, env = stack_home(f"bench-policy-{name}-")
    command = [
        str(REPO / ".venv" / "bin" / "firn"),
        "up",
        "--demo",
        "--json",
        f"--duration={args.duration:g}",
        f"--rate={args.rate:g}",
        f"--batch={args.batch}",
        f"--keys={args.keys}",
        f"--distribution={spec['distribution']}",
        f"--delete-ratio={spec['delete_ratio']:g}",
        "--idle-seconds=0",
        f"--seed={args.seed}",
        *(f"--property={pair}" for pair in args.properties),
        *([] if args.stall_wait is None else [f"--stall-wait={args.stall_wait:g}"]),
        *(["--carry"] if args.carry else []),
    ]
    load_before = os.getloadavg()
    try:
        # Start-up, the final read of the table and the model check take a while on
        # top of producing; past this the run is stuck (`firn up` takes its stack down
        # with it when killed).
        done = subprocess.run(
            command,
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=args.duration * 2 + 900,
        )
        stdout, stderr = done.stdout, done.stderr
        # The stack is down; its catalog and files are what the floor replays.
        replayed = replay(home)
    except subprocess.TimeoutExpired as exc:
        stdout, stderr = _text(exc.stdout), _text(exc.stderr) + "\n(timed out)"
        replayed = {"floor": None, "error": "the run timed out"}
    finally:
        if not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)
    # The machine may be shared: the load average (1, 5, 15 min) says how busy it was.
    load = {"before": list(load_before), "after": list(os.getloadavg())}
    progress, summary = parse_lines(stdout)
    if summary is None:
        return {
            "ok": False,
            "workload": spec,
            "loadavg": load,
            "error": "no summary",
            "stderr": stderr[-3000:],
        }
    return {
        "ok": bool(summary["ok"]),
        "workload": spec,
        "loadavg": load,
        "produced": {
            "seconds": summary["seconds"],
            "commits": summary["commits"],
            "rows": summary["rows"],
            "rows_per_s": round(summary["rows"] / summary["seconds"]) if summary["seconds"] else 0,
            "live_rows": summary["live_rows"],
            "operations": summary["operations"],
        },
        "model_check": summary["model_check"],
        "compactions": summary["compactions"],
        "write_amplification": write_amplification(summary),
        "read_amplification": read_amplification(progress),
        "space_amplification": space_amplification(progress),
        "backlog": backlog(progress, summary),
        "latency": summary["latency"],
        "back_pressure": summary["back_pressure"],
        "compaction_throughput": throughput(summary["compaction_work"], replayed),
        "load": (summary["resources"]["load"] or {}).get("processes"),
        "series": {"columns": SERIES_COLUMNS, "rows": series(progress)},
        "last_progress": progress[-1] if progress else None,
        "home": str(home) if args.keep_home else None,
        "error": summary["error"],
    }


def replay(home: Path) -> dict[str, Any]:
    """The floor on the run's own task inputs (``policy_replay.py``), or why not."""
    try:
        floor = replay_floor(home)
    except Exception as exc:  # a failed replay must not cost the run's other numbers
        return {"floor": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"floor": floor, "error": None if floor else "no committed task to replay"}


def throughput(work: dict[str, Any], replayed: dict[str, Any]) -> dict[str, Any]:
    """The engine's bytes per busy second against the floor on the run's own task
    inputs, and against the older floor on files like the mean task's."""
    engine = work["bytes_per_busy_s"]
    mean = work["mean_task_input_bytes"]
    like = (
        None
        if not mean
        else measure_floor(
            int(mean),
            work["base_share"],
            round(work["mean_task_change_files"]),
            REPO / ".firn",
        )
    )
    floor = replayed["floor"]
    return {
        "engine": work,
        "floor": None if floor is None else floor.as_dict(),
        "floor_error": replayed["error"],
        "engine_per_floor": None
        if floor is None or engine is None or not floor.bytes_per_s
        else round(engine / floor.bytes_per_s, 3),
        "mean_task_floor": None if like is None else like.as_dict(),
        "engine_per_mean_task_floor": None
        if like is None or engine is None
        else round(engine / like.bytes_per_s, 3),
        "note": "engine: bytes read by this run's compaction tasks / wall seconds during "
        "which any of them was executing (claim to result, from the catalog's transition "
        "history; includes Spark job and per-task overhead). floor: the same work in plain "
        "pyarrow on the run's own inputs: up to 300 committed tasks spread over the run, "
        "each one's input files read whole, sorted by key then seq, the last row per key "
        "kept, written zstd, one call per task (faster of two), measured after the stack "
        "stopped (policy_replay.py). mean_task_floor: the same merge on generated files "
        "like the mean task's (its bytes, base share and number of change files, one base "
        "file; best of 3; policy_floor.py), the floor before 2026-11-26",
    }


def summary_line(name: str, r: dict[str, Any]) -> str:
    if "produced" not in r:
        return f"{name}: FAILED ({r.get('error')}): {r.get('stderr', '')[-500:]}"
    p, w, ra = r["produced"], r["write_amplification"], r["read_amplification"]
    b, lat, t = r["backlog"], r["latency"], r["compaction_throughput"]
    space = r["space_amplification"]["mean_second_half"]
    engine = t["engine"]["bytes_per_busy_s"]
    floor = t["floor"]["bytes_per_s"] if t["floor"] else None
    like = t["mean_task_floor"]["bytes_per_s"] if t["mean_task_floor"] else None
    return "\n".join(
        [
            f"{name}: {p['rows_per_s']:,} rows/s for {p['seconds']}s, "
            f"model check {'ok' if r['model_check']['matches'] else 'MISMATCH'}, "
            f"compactions {r['compactions']}; load average {r['loadavg']['before'][0]:.1f} "
            f"before, {r['loadavg']['after'][1]:.1f} over the last 5 min after",
            f"  write amplification  {_x(w['total_per_committed'])} (committed + rewritten) "
            f"/ committed; {_x(w['rewritten_per_committed'])} rewritten / committed "
            f"({w['committed_bytes'] / MiB:.0f} MiB committed)",
            f"  read amplification   runs per node: mean {ra['mean_runs_over_time']}, "
            f"p95 {ra['p95_runs_all_samples']}, max {ra['max_runs']}; second half: mean "
            f"{ra['mean_runs_second_half']}, p95 {ra['p95_runs_second_half']}",
            f"  space amplification  {_x(space)} (mean over the second half)",
            f"  backlog              {b['verdict']}: slope {_mib(b['slope_bytes_per_s'])}/s = "
            f"{_pct(b['slope_per_ingest'])} of ingest ({_mib(b['ingest_bytes_per_s'])}/s); "
            f"mean {_mib(b['mean_bytes'])}, max {_mib(b['max_bytes'])}",
            f"  latency              median {lat['median_s']}s, p95 {lat['p95_s']}s, "
            f"max {lat['max_s']}s ({lat['waiting']} waiting at the end)",
            f"  compaction           {_mib(engine)}/s vs floor {_mib(floor)}/s: "
            f"{_x(t['engine_per_floor'])} on the run's own inputs; vs {_mib(like)}/s on "
            f"files like the mean task's: {_x(t['engine_per_mean_task_floor'])} "
            f"(mean task {_mib(t['engine']['mean_task_input_bytes'])})",
            f"  back-pressure        {r['back_pressure']['stalled_commits']} commits waited "
            f"{r['back_pressure']['stall_seconds']}s in all",
        ]
    )


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MiB:.2f} MiB"


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
