"""A fleet of keyed tables under steady producers, on the whole stack (issue 37).

Starts `firn up --json` (Postgres, Kafka and the services, no demo) in a throwaway
home, creates --tables tables of --partitions partitions each, and runs --producers
processes (``fleet_producer.py``) that commit --batch-row change sets through the
public API (``Table.commit``) to tables drawn at random, open loop at --rate commits
a second in all, for --duration seconds. Every --sample-every seconds it samples the
fleet (``sample_fleet``, which is ``firn status --fleet``'s ``fleet_status``):
partitions with unmerged changes and those of them the triggers find due, open plans,
and each service's and Postgres's CPU (the sample's own queries included). Once the
producers stop it waits for the fleet to settle (no partition due in a full pass, no
plan open), then reports commit-to-compacted latency pooled over every table, how
long a due partition waited for its compaction (``plan_to_compacted``), the
catalog's size over the run, and checks every table against its producer's model.
With --members N every service runs N members (``fleet_members.py``) and the report
says how the work spread: each consumer group's partitions per member, each member's
CPU, the tasks each dispatcher member ran.
The baseline is the issue's goals, checked in the same run: the asked rate held with
commit p95 <= 100 ms, at most 10 % of partitions due at any sample, due-to-compacted
p95 <= 30 s, settled within 60 s.

    .venv/bin/python bench/fleet.py --tables 1000 --rate 50 --duration 300
    .venv/bin/python bench/fleet.py --sizes 300,1000,3000 --out fleet.json
    .venv/bin/python bench/fleet.py --tables 1000 --rate 50 --duration 300 --members 2

One JSON object per size on stdout (--out: the object, or with --sizes the list),
a progress line per sample on stderr: the run so far, and the window since the line
before, where a fleet's steady state shows (the whole run's p95 takes in the first
minutes, before partitions fold at their cadence; ``commit_ms_second_half`` gives
the later half's). Exits 1 when a run failed or a table differed
from its model.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import multiprocessing as mp
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fleet_statements
from fleet_members import (
    ExtraMembers,
    group_members,
    member_pids,
    spread,
    tasks_by_member,
    topic_events,
)
from fleet_producer import (
    PARTITION_BY,
    PRIMARY_KEY,
    SCHEMA,
    ProducerSpec,
    note_of,
    partition_of,
    run_producer,
    unpack,
)
from harness import (  # bench/ is on sys.path when run as a script
    SLOW_CREATE_US,
    file_create_us,
    stack_home,
)

import firn
from firn.catalog.fleet import fleet_status
from firn.catalog.metrics import partition_metrics
from firn.catalog.plans import OPEN_PLAN_STATES
from firn.catalog.progress import commit_points, latency_summary, merge_points, percentile
from firn.commands.tables import parse_properties
from firn.errors import ConfigError
from firn.model.properties import TableProperties
from firn.model.triggers import decide
from firn.postgres import connect as pg_connect
from firn.postgres.connection import Connection
from firn.settings import FirnSettings
from firn_localstack.postgres import STATEMENTS_ENV
from firn_localstack.stack import read_state
from firn_localstack.usage import Usage, delta, read_all

REPO = Path(__file__).resolve().parents[1]

OPEN_STATES = [s.value for s in OPEN_PLAN_STATES]
UP_TIMEOUT = 600.0
"""Seconds `firn up` may take to report the stack up (a first run fetches Kafka)."""
QUIET_PORTS = {
    # The bench reads the catalog, not the endpoints; fixed ports would clash with
    # another stack on this machine.
    "FIRN_DASHBOARD_PORT": "0",
    **{
        f"FIRN_{name.upper()}_PROMETHEUS_PORT": "0"
        for name in ("metrics", "planner", "dispatcher", "committer", "publisher")
    },
}


def main() -> int:
    args = _parse_args()
    sizes = args.sizes or [args.tables]
    results = []
    for tables in sizes:
        result = run_size(args, tables)
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.out is not None:
        data: Any = results if args.sizes else results[0]
        args.out.write_text(json.dumps(data, indent=2) + "\n")
    return 0 if all(r.get("model_ok") for r in results) else 1


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000, help="tables in the fleet")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per table")
    parser.add_argument("--rate", type=float, default=50.0, help="commits/s over all producers")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of producing")
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--batch", type=int, default=200, help="rows per commit")
    parser.add_argument("--keys", type=int, default=2000, help="ids per table")
    parser.add_argument("--delete-ratio", type=float, default=0.1, help="share of rows deleted")
    parser.add_argument(
        "--settle", type=float, default=180.0, help="most seconds to wait for the fleet to settle"
    )
    parser.add_argument(
        "--sample-every",
        type=float,
        default=10.0,
        help="seconds between samples (each reads the fleet as firn status --fleet does: "
        "its catalog load is part of what is measured)",
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a table property over the defaults; repeatable",
    )
    parser.add_argument(
        "--members",
        type=int,
        default=1,
        help="members of every service's consumer group (the stack's own one and N-1 more)",
    )
    parser.add_argument(
        "--keep-home", action="store_true", help="keep the stack's home and its logs"
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="report the catalog's load by statement and role (pg_stat_statements)",
    )
    parser.add_argument(
        "--disk-wait",
        type=float,
        default=600.0,
        help="longest wait for file creation in the home to be fast again before producing "
        "(after a run's many deletions, ext4 without a journal is slow for minutes)",
    )
    parser.add_argument("--seed", type=int, default=37, help="seed of the producers' workload")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--sizes", type=_sizes, help="comma list of fleet sizes, one full run each (e.g. 300,1000)"
    )
    args = parser.parse_args()
    if min(args.tables, args.partitions, args.producers, args.batch, args.keys, args.members) <= 0:
        parser.error(
            "--tables, --partitions, --producers, --batch, --keys and --members must be positive"
        )
    if args.rate <= 0 or args.duration <= 0 or args.sample_every <= 0:
        parser.error("--rate, --duration and --sample-every must be positive")
    if not 0 <= args.delete_ratio < 1:
        parser.error("--delete-ratio is in [0, 1)")
    try:
        args.properties = TableProperties.parse(parse_properties(args.property))
    except ConfigError as exc:
        parser.error(str(exc))
    return args


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError("--sizes takes positive whole numbers, e.g. 300,1000")
    return sizes


# -- one run -----------------------------------------------------------------------


def run_size(args: argparse.Namespace, tables: int) -> dict[str, Any]:
    """One full run on a fresh stack; a failure is reported in the result, so the
    other sizes still run."""
    home, env = stack_home("bench-fleet-")
    if args.statements:
        env = {**env, STATEMENTS_ENV: "1"}
    try:
        with running_stack(home, {**env, **QUIET_PORTS}):
            members = ExtraMembers(home, args.members, {**os.environ, **QUIET_PORTS})
            try:
                return measure(args, tables, home, members)
            finally:
                members.stop()
    except Exception as exc:
        traceback.print_exc()
        return {"tables": tables, "error": f"{type(exc).__name__}: {exc}", "model_ok": False}
    finally:
        if args.keep_home:
            print(f"the stack's home, with its logs, is kept: {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)


def settled_disk(home: Path, most_seconds: float) -> float:
    """A file's creation time in ``home`` (us), once it is below ``SLOW_CREATE_US`` or
    ``most_seconds`` have passed. After many files were deleted (the last run's home
    removed), ext4 without a journal scans the freed inodes at every creation for
    minutes (``harness.bench_root``): a run started then measures the disk's recent
    past, not Firn. A disk still slow is warned of and the run goes on."""
    began = time.monotonic()
    took = file_create_us(home)
    while took > SLOW_CREATE_US and time.monotonic() - began < most_seconds:
        print(
            f"creating a file in {home} takes {took:.0f} us; waiting for the disk to settle",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(15)
        took = file_create_us(home)
    if took > SLOW_CREATE_US:
        print(
            f"WARNING: creating a file in {home} still takes {took:.0f} us: commit latencies "
            "here measure the disk (see harness.bench_root; FIRN_BENCH_DIR)",
            file=sys.stderr,
            flush=True,
        )
    return took


@contextlib.contextmanager
def running_stack(home: Path, env: dict[str, str]) -> Iterator[dict[str, Any]]:
    """`firn up --json` in ``home`` until the block ends; this process's FIRN_
    variables point at it meanwhile (the bench's catalog and the producers, which
    inherit them)."""
    # The Kafka jars are fetched once into the repository's cache; a fresh home
    # would fetch them again.
    cache = REPO / ".firn" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    (home / "cache").symlink_to(cache, target_is_directory=True)
    log = (home / "up.log").open("w")
    command = [str(REPO / ".venv" / "bin" / "firn"), "up", "--json"]
    print(f"starting firn up --json (home {home}) ...", file=sys.stderr, flush=True)
    proc = subprocess.Popen(
        command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True
    )
    saved = dict(os.environ)
    try:
        report = _wait_up(proc, home)
        os.environ.update(
            FIRN_DATABASE_URL=report["database_url"],
            FIRN_KAFKA_BOOTSTRAP=report["kafka_bootstrap"],
            FIRN_HOME=env["FIRN_HOME"],
            FIRN_WAREHOUSE=env["FIRN_WAREHOUSE"],
        )
        yield report
    finally:
        os.environ.clear()
        os.environ.update(saved)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()  # `firn up` takes its children with it even then
            proc.wait()
        log.close()


def _wait_up(proc: subprocess.Popen[str], home: Path) -> dict[str, Any]:
    """The report line `firn up` prints once every service has connected."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, name="firn-up-stdout", daemon=True).start()
    deadline = time.monotonic() + UP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            break
        with contextlib.suppress(ValueError):
            report = json.loads(line)
            if isinstance(report, dict) and report.get("status") == "up":
                return report
    tail = (home / "up.log").read_text()[-3000:]
    raise RuntimeError(f"firn up did not report the stack up (exit {proc.poll()}):\n{tail}")


def measure(
    args: argparse.Namespace, tables: int, home: Path, members: ExtraMembers
) -> dict[str, Any]:
    settings = FirnSettings(application_name="firn-bench-fleet")
    create_us = {"before": settled_disk(home, args.disk_wait)}
    with firn.connect(settings=settings) as catalog:
        names, create_s = create_tables(catalog, tables, args.properties)
        print(f"created {tables} tables in {create_s:.1f}s", file=sys.stderr, flush=True)
        conn = pg_connect(settings.with_local_stack(), autocommit=True)
        try:
            if args.members > 1:
                members.start(conn)
                print(f"{args.members} members of every service", file=sys.stderr, flush=True)
            if args.statements:
                fleet_statements.start(conn)
            run = produce(args, names, home)
            statements = (
                fleet_statements.read(conn, run.ended - run.began) if args.statements else None
            )
            groups = group_members(settings.with_local_stack())
            try:
                settled = settle(conn, run, args, home)
            finally:
                run.sampler.stop()
            latency = fleet_latency(conn)
            latency["plan_to_compacted"] = plan_to_compacted(conn)
            size = catalog_size(conn)
            tasks = tasks_by_member(conn)
            events = topic_events(settings.with_local_stack())
        finally:
            conn.close()
        mismatched = verify(catalog, run.models, args.partitions)
    create_us["after"] = file_create_us(home)
    result = report(args, tables, create_s, run, settled, latency, size, mismatched)
    result["file_create_us"] = create_us
    if statements is not None:
        result["statements"] = statements
        print("\n".join(fleet_statements.lines(statements)), file=sys.stderr, flush=True)
    result["events"] = events
    claims = sum(tasks.values())
    result["plan_task_events_per_claim"] = (
        round(events.get("plan-tasks", 0) / claims, 2) if claims else None
    )
    stack_pids = (read_state(home) or {}).get("pids", {})
    result["members"] = {
        "per_service": args.members,
        "groups": groups,
        "spread": spread(home, stack_pids, result["cpu_cores"]["producing"], tasks),
    }
    return result


def create_tables(
    catalog: firn.Catalog, count: int, properties: TableProperties
) -> tuple[list[str], float]:
    """``fleet.t00000`` ... and how long creating them took (their partitions appear
    with the first commit that writes them)."""
    names = [f"fleet.t{i:05d}" for i in range(count)]
    began = time.perf_counter()
    for name in names:
        catalog.create_table(name, SCHEMA, PRIMARY_KEY, PARTITION_BY, properties.as_dict())
    return names, time.perf_counter() - began


# -- producing ---------------------------------------------------------------------


@dataclass
class Progress:
    """What the producers reported so far; the sampler reads it from its thread."""

    latencies: list[float] = field(default_factory=list)
    behind: dict[int, float] = field(default_factory=dict)
    errors: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    shown: tuple[int, float] = (0, 0.0)
    """Commits reported and the run's seconds at the last line: each line also gives
    the window since the one before, where a fleet's steady state shows (the whole
    run's p95 is diluted by its first minutes, before partitions reach their fold)."""

    def add(self, index: int, latencies: list[float], behind: float, errors: int) -> None:
        with self.lock:
            self.latencies.extend(latencies)
            self.behind[index] = behind
            self.errors[index] = errors

    def line(self, seconds: float) -> str:
        with self.lock:
            commits = len(self.latencies)
            p95 = percentile(self.latencies, 0.95) * 1000 if self.latencies else 0.0
            (before, then), self.shown = self.shown, (commits, seconds)
            window = self.latencies[before:]
        recent = percentile(window, 0.95) * 1000 if window else 0.0
        rate = len(window) / max(seconds - then, 1e-9)
        return (
            f"commits={commits} ({commits / max(seconds, 1e-9):.1f}/s) p95={p95:.0f}ms "
            f"[since last: {rate:.1f}/s p95={recent:.0f}ms]"
        )


@dataclass
class Run:
    """A producing window and what came of it."""

    progress: Progress
    sampler: Sampler
    results: dict[int, dict[str, Any]]
    models: dict[str, tuple[bytes, bytes]]
    began: float
    """perf_counter when producing began."""
    ended: float
    """perf_counter when the last commit ended."""
    cpu: list[tuple[float, dict[str, Usage]]]
    """CPU readings at the start and end of producing (settle appends its end)."""


def produce(args: argparse.Namespace, names: list[str], home: Path) -> Run:
    """Start the producers, wait until each has its table handles, start them
    together, and collect what they report until all are done."""
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    start = ctx.Event()
    start_at = ctx.Value("d", 0.0)
    per_producer = args.rate / args.producers
    specs = [
        ProducerSpec(
            index=k,
            tables=tuple(names[k :: args.producers]),
            rate=per_producer,
            duration=args.duration,
            batch=args.batch,
            keys=args.keys,
            partitions=args.partitions,
            delete_ratio=args.delete_ratio,
            seed=args.seed * 1000 + k,
        )
        for k in range(args.producers)
        if names[k :: args.producers]
    ]
    procs = [
        ctx.Process(target=run_producer, args=(spec, start, start_at, events), name=f"p{k}")
        for k, spec in enumerate(specs)
    ]
    progress = Progress()
    sampler = Sampler(home, progress, args, len(names))
    try:
        for proc in procs:
            proc.start()
        _await(events, procs, "ready", time.monotonic() + 300, progress)
        cpu = [read_cpu(home)]
        start_at.value = time.time() + 0.5
        start.set()
        began = time.perf_counter() + 0.5
        sampler.start(began)
        results = _await(events, procs, "done", time.monotonic() + args.duration + 120, progress)
        cpu.append(read_cpu(home))
        # The last commit's end: the models' trip back is not producing.
        ended = began + max(r["seconds"] for r in results.values())
    except BaseException:
        sampler.stop()
        raise
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    models = {name: packed for r in results.values() for name, packed in r.pop("models").items()}
    return Run(progress, sampler, results, models, began, ended, cpu)


def _await(
    events: Any, procs: Sequence[Any], kind: str, deadline: float, progress: Progress
) -> dict[int, dict[str, Any]]:
    """Messages of ``kind`` from every producer (``done`` carries its result); a
    producer that failed, died or ran past ``deadline`` fails the run."""
    got: dict[int, dict[str, Any]] = {}
    while len(got) < len(procs):
        try:
            message = events.get(timeout=1.0)
        except queue.Empty:
            message = None
        if message is None:
            dead = [p.name for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"producers {dead or 'too slow'} before all were {kind}")
            continue
        what, index = message[0], message[1]
        if what == "failed":
            raise RuntimeError(f"producer {index} failed:\n{message[2]}")
        if what == "progress":
            progress.add(index, *message[2:])
        elif what == "done":
            result = message[2]
            progress.add(index, result["latencies"], result["behind_max_s"], result["errors"])
            got[index] = result
        elif what == kind:
            got[index] = {}
    return got


# -- sampling ----------------------------------------------------------------------


def sample_fleet(conn: Connection) -> dict[str, Any]:
    """The fleet now, as ``firn status --fleet`` sees it (``firn.catalog.fleet``):
    partitions, those with unmerged changes and those of them the triggers find due
    (over the whole fleet: the issue's measurement ran the triggers on a sample of 20
    tables), open plans and their tasks, and how long the longest-waiting due
    partition's oldest change has waited. What it costs is reported too: its queries
    are part of the Postgres CPU measured."""
    began = time.perf_counter()
    status = fleet_status(conn, top=0)
    oldest = status.oldest_due
    return {
        "tables": status.tables,
        "partitions": status.partitions,
        "unmerged": status.partitions_unmerged,
        "due": status.partitions_due,
        "tables_due": status.tables_due,
        "open_plans": status.open_plans,
        "tasks": status.tasks,
        "oldest_due_s": None if oldest is None else oldest.waiting_seconds,
        "catalog_rows": catalog_rows(conn),
        "catalog_bytes": _one(
            conn,
            "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_stat_user_tables "
            "WHERE schemaname = current_schema()",
        )[0],
        "sample_s": round(time.perf_counter() - began, 3),
    }


HISTORY = (
    "snapshot",
    "data_file",
    "compaction_plan",
    "compaction_task",
    "state_transition",
    "partition_merge_history",
    "orphan_file",
)
"""The catalog tables every commit or compaction adds rows to: retention must keep
them bounded (``firn.catalog.pruning``)."""


def catalog_rows(conn: Connection) -> dict[str, int]:
    """Live rows of each history table, as Postgres's statistics estimate them (a
    count(*) of each would be most of a sample's cost on a large catalog)."""
    rows = conn.execute(
        "SELECT relname, n_live_tup FROM pg_stat_user_tables "
        "WHERE schemaname = current_schema() AND relname = ANY(%s)",
        (list(HISTORY),),
    ).fetchall()
    return {str(name): int(n) for name, n in sorted(rows)}


def open_plans(conn: Connection) -> int:
    return _one(conn, "SELECT count(*) FROM compaction_plan WHERE state = ANY(%s)", OPEN_STATES)[0]


def _one(conn: Connection, sql: str, *params: Any) -> list[int]:
    row = conn.execute(sql, params or None).fetchone()
    assert row is not None
    return [int(v) for v in row]


def read_cpu(home: Path) -> tuple[float, dict[str, Usage]]:
    """A CPU reading of every process of the stack (each with its children: Postgres
    with its backends, the dispatcher with its workers). The pids are read each time:
    the supervisor restarts a service that exited under a new one."""
    pids = {**(read_state(home) or {}).get("pids", {}), **member_pids(home)}
    return time.monotonic(), read_all(pids)


def cores(
    before: tuple[float, dict[str, Usage]], after: tuple[float, dict[str, Usage]]
) -> dict[str, float]:
    """CPU seconds per wall second of each process tree between two readings."""
    wall = max(after[0] - before[0], 1e-9)
    return {name: round(used / wall, 3) for name, used in delta(before[1], after[1]).items()}


class Sampler:
    """Samples the fleet every --sample-every seconds on its own connection (a
    connection is not shared between threads) and prints a progress line."""

    def __init__(self, home: Path, progress: Progress, args: argparse.Namespace, tables: int):
        self.home, self.progress, self.args, self.tables = home, progress, args, tables
        self.samples: list[dict[str, Any]] = []
        self.phase = "producing"
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-sampler", daemon=True)
        self._began = 0.0

    def start(self, began: float) -> None:
        self._began = began
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        settings = FirnSettings(application_name="firn-bench-fleet-sampler").with_local_stack()
        conn = pg_connect(settings, autocommit=True)
        cpu = read_cpu(self.home)
        try:
            ticks = 0
            # On a fixed grid from the start: a slow sample does not push the next.
            while not self._stopping.wait(self._next(ticks := ticks + 1)):
                try:
                    sample = sample_fleet(conn)
                except Exception as exc:  # a missed sample, not a failed run
                    print(f"sample failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                now = read_cpu(self.home)
                sample["cpu_cores"] = cores(cpu, now)
                cpu = now
                sample["t"] = round(time.perf_counter() - self._began, 1)
                sample["phase"] = self.phase
                self.samples.append(sample)
                print(self._line(sample), file=sys.stderr, flush=True)
        finally:
            conn.close()

    def _next(self, tick: int) -> float:
        every = float(self.args.sample_every)
        return max(0.0, self._began + tick * every - time.perf_counter())

    def _line(self, s: dict[str, Any]) -> str:
        expected = self.tables * self.args.partitions
        cpu = s["cpu_cores"]
        return (
            f"{'settling ' if s['phase'] == 'settling' else ''}t={s['t']:.0f}s "
            f"{self.progress.line(min(s['t'], self.args.duration))} "
            f"due={s['due']}/{expected} unmerged={s['unmerged']}/{expected} "
            f"open_plans={s['open_plans']} oldest_due={s['oldest_due_s'] or 0:.0f}s "
            f"cpu metrics={cpu.get('metrics', 0):.2f} postgres={cpu.get('postgres', 0):.2f} "
            f"dispatcher={cpu.get('dispatcher', 0):.2f} "
            f"catalog={sum(s['catalog_rows'].values()) / 1000:.0f}k rows "
            f"{s['catalog_bytes'] / 2**20:.0f} MiB"
        )


# -- settling, latency, verification -----------------------------------------------


@dataclass(frozen=True)
class Settled:
    seconds: float | None
    """Seconds from the producers' end to the end of the first pass that found no
    partition due and no plan open; None if the fleet did not settle in time."""
    passes: int
    pass_seconds: float
    """How long the last full pass took (an upper bound on the settle time's error)."""
    remaining: dict[str, Any] | None


def settle(conn: Connection, run: Run, args: argparse.Namespace, home: Path) -> Settled:
    """Wait, up to --settle seconds, for a full pass over every table that finds no
    partition due by the triggers with no plan open before or after it."""
    run.sampler.phase = "settling"
    ids = [int(r[0]) for r in conn.execute("SELECT table_id FROM catalog_table ORDER BY 1")]
    began = run.ended  # the last commit's end, not this call's: collecting takes time
    passes, pass_seconds = 0, 0.0
    while True:
        # While plans are open the fleet is not settled: skip the dear full pass.
        before = open_plans(conn)
        at_deadline = time.perf_counter() - began >= args.settle
        due: list[tuple[int, str, str]] = []
        if before == 0 or at_deadline:
            pass_began = time.perf_counter()
            due = due_partitions(conn, ids, args.properties)
            pass_seconds, passes = time.perf_counter() - pass_began, passes + 1
            if before == 0 and not due and open_plans(conn) == 0:
                run.cpu.append(read_cpu(home))
                return Settled(round(time.perf_counter() - began, 1), passes, pass_seconds, None)
        if at_deadline:
            run.cpu.append(read_cpu(home))
            remaining = {"open_plans": before, "due": len(due), "due_examples": due[:5]}
            return Settled(None, passes, pass_seconds, remaining)
        time.sleep(1.0)


def due_partitions(
    conn: Connection, table_ids: Sequence[int], properties: TableProperties
) -> list[tuple[int, str, str]]:
    """Every partition of the fleet the triggers find due, with why. Every table has
    the bench's properties, so they are not read back."""
    due = []
    for table_id in table_ids:
        for part, metrics in partition_metrics(conn, table_id, properties).items():
            decision = decide(metrics, properties)
            if decision.kind is not None:
                due.append((table_id, part, f"{decision.kind}: {'; '.join(decision.reasons)}"))
    return due


def fleet_latency(conn: Connection) -> dict[str, Any]:
    """Commit-to-compacted latency over every (commit, partition) pair of the fleet;
    partitions are named per table so that pooling keeps them apart."""
    commits, merges = [], []
    for (table_id,) in conn.execute("SELECT table_id FROM catalog_table ORDER BY 1").fetchall():
        commits += [
            dataclasses.replace(c, partition=f"{table_id}/{c.partition}")
            for c in commit_points(conn, table_id)
        ]
        merges += [
            dataclasses.replace(m, partition=f"{table_id}/{m.partition}")
            for m in merge_points(conn, table_id)
        ]
    summary = latency_summary(commits, merges)
    rounded = summary.as_dict()
    return {
        "p50": rounded["median_s"],
        "p95": rounded["p95_s"],
        "max": rounded["max_s"],
        "compacted": summary.compacted,
        "never": summary.waiting,
    }


def plan_to_compacted(conn: Connection) -> dict[str, Any]:
    """Per committed plan, the seconds from the first plan made for its partition
    since the one committed before it (replaced plans included) to its commit: how
    long a partition the metrics service found due waited for its compaction. The
    metrics service requests a plan at the commit that makes a partition due, so the
    only part of due-to-compacted left out is that request's trip to the planner.
    Over the plans retention has kept."""
    waits = [
        float(w)
        for (w,) in conn.execute(
            "WITH c AS (SELECT p.plan_id, p.table_id, p.partition_key, s.created_at AS done, "
            "lag(p.plan_id, 1, 0::bigint) OVER (PARTITION BY p.table_id, p.partition_key "
            "ORDER BY p.plan_id) AS before FROM compaction_plan p JOIN snapshot s "
            "ON s.table_id = p.table_id AND s.snapshot_id = p.committed_snapshot "
            "WHERE p.state = 'Committed') "
            "SELECT extract(epoch FROM c.done - (SELECT min(q.created_at) FROM compaction_plan q "
            "WHERE q.table_id = c.table_id AND q.partition_key = c.partition_key "
            "AND q.plan_id > c.before AND q.plan_id <= c.plan_id)) FROM c"
        ).fetchall()
    ]
    ordered = sorted(waits)
    if not ordered:
        return {"p50": None, "p95": None, "max": None, "plans": 0}
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "max": round(ordered[-1], 2),
        "plans": len(ordered),
    }


def catalog_size(conn: Connection) -> dict[str, int]:
    size = {f"{name}_rows": _one(conn, f"SELECT count(*) FROM {name}")[0] for name in HISTORY}
    size["bytes"] = _one(conn, "SELECT pg_database_size(current_database())")[0]
    return size


def verify(
    catalog: firn.Catalog, models: dict[str, tuple[bytes, bytes]], partitions: int
) -> list[str]:
    """The tables whose ``read()`` differs from their producer's model."""
    mismatched = []
    for name, packed in sorted(models.items()):
        ids, vs = unpack(packed)
        got = catalog.table(name).read().sort_by("id")
        if (
            got.column("id").to_pylist() != ids
            or got.column("v").to_pylist() != vs
            or got.column("p").to_pylist() != [partition_of(k, partitions) for k in ids]
            or got.column("note").to_pylist() != [note_of(v) for v in vs]
        ):
            mismatched.append(name)
    return mismatched


# -- the report --------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    tables: int,
    create_s: float,
    run: Run,
    settled: Settled,
    latency: dict[str, Any],
    size: dict[str, int],
    mismatched: list[str],
) -> dict[str, Any]:
    latencies = run.progress.latencies
    commits = sum(r["commits"] for r in run.results.values())
    seconds = max(r["seconds"] for r in run.results.values())
    producing = [s for s in run.sampler.samples if s["phase"] == "producing"]
    expected = tables * args.partitions
    due = [s["due"] / expected for s in producing]
    unmerged = [s["unmerged"] / expected for s in producing]
    cpu = {"producing": cores(run.cpu[0], run.cpu[1]), "settling": cores(run.cpu[1], run.cpu[2])}
    cpu["producing"]["producers"] = round(
        sum(r["cpu_s"] for r in run.results.values()) / max(seconds, 1e-9), 3
    )
    commit_ms = _quantiles_ms(latencies)
    reached = commits / max(seconds, 1e-9)
    result = {
        "benchmark": "bench/fleet.py",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "tables": tables,
        "partitions": args.partitions,
        "producers": args.producers,
        "batch": args.batch,
        "keys": args.keys,
        "duration_s": args.duration,
        "properties": parse_properties(args.property),
        "create_tables_s": round(create_s, 2),
        "asked_rate": args.rate,
        "reached_rate": round(reached, 2),
        "commits": commits,
        "errors": sum(r["errors"] for r in run.results.values()),
        "error_samples": [e for r in run.results.values() for e in r["error_samples"]][:5],
        "commit_ms": commit_ms,
        # The later half of the commits, once partitions fold at their cadence.
        "commit_ms_second_half": _quantiles_ms(latencies[len(latencies) // 2 :]),
        "commit_phases_ms": _phases_ms(run.results.values()),
        "behind_max_s": round(max(r["behind_max_s"] for r in run.results.values()), 3),
        "due_share": _stats(due, 4),
        "unmerged_share": _stats(unmerged, 4),
        "open_plans": _stats([s["open_plans"] for s in producing], 1),
        "oldest_due_s": _stats([s["oldest_due_s"] or 0.0 for s in producing], 1),
        "sample_s": _stats([s["sample_s"] for s in run.sampler.samples], 3),
        "compacted_latency_s": latency,
        "settle_s": settled.seconds,
        "settle": {
            "passes": settled.passes,
            "pass_s": round(settled.pass_seconds, 2),
            "remaining": settled.remaining,
        },
        "cpu_cores": cpu,
        "catalog": size,
        "catalog_growth": _growth(run.sampler.samples),
        "model_ok": not mismatched,
        "mismatched": mismatched[:5],
        "mismatched_count": len(mismatched),
        "samples": run.sampler.samples,
    }
    result["goals"] = {
        "rate_held": reached >= 0.95 * args.rate,
        "commit_p95_le_100ms": commit_ms["p95"] is not None and commit_ms["p95"] <= 100,
        "due_share_le_10pct": bool(due) and max(due) <= 0.10,
        "due_to_compacted_p95_le_30s": (waits := latency["plan_to_compacted"]["p95"]) is not None
        and waits <= 30,
        "settles_within_60s": settled.seconds is not None and settled.seconds <= 60,
    }
    return result


def _growth(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The catalog's history rows and bytes about every ten minutes of the run (and
    its last sample): bounded by retention, they level off instead of climbing."""
    if not samples:
        return []
    picked, next_at = [], 0.0
    for s in samples:
        if s["t"] >= next_at:
            picked.append(s)
            next_at = s["t"] + 600
    if picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    return [
        {"t": s["t"], "phase": s["phase"], "rows": s["catalog_rows"], "bytes": s["catalog_bytes"]}
        for s in picked
    ]


def _quantiles_ms(latencies: list[float]) -> dict[str, float | None]:
    if not latencies:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    return {
        "p50": round(statistics.median(latencies) * 1000, 1),
        "p95": round(percentile(latencies, 0.95) * 1000, 1),
        "p99": round(percentile(latencies, 0.99) * 1000, 1),
        "max": round(max(latencies) * 1000, 1),
    }


def _phases_ms(results: Iterable[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """p50 and p95 of each step of a commit (``Committed.phases``) over every commit."""
    pooled: dict[str, list[float]] = {}
    for result in results:
        for name, seconds in result["phases"].items():
            pooled.setdefault(name, []).extend(seconds)
    return {
        name: {k: v for k, v in _quantiles_ms(seconds).items() if k in ("p50", "p95")}
        for name, seconds in pooled.items()
    }


def _stats(values: Sequence[float], digits: int) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "max": None}
    return {"mean": round(statistics.fmean(values), digits), "max": round(max(values), digits)}


if __name__ == "__main__":
    sys.exit(main())
