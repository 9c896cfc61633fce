"""``firn up --demo``: a synthetic CDC producer on the running stack, live progress,
and a summary that checks the product's promise.

The producer commits batches (``workload.py``) to the demo table at a steady rate
through the public API (``Table.commit``), exactly as any producer would; the
services notice the commits through Kafka and compact on their own. Once a second
it shows what the catalog says (``firn.catalog.progress``). When stopped (Ctrl-C,
``firn down`` or ``--duration``) it reads the table, compares it with the reference
model it kept, and reports commit-to-compacted latency and what each process of the
stack cost, idle and under load (``usage.py``). A table that differs from the model
is an error: the demo exits 1.

The demo table's properties make compaction visible within seconds on a laptop and
keep what it rewrites low (issue 15, ``bench/policy.py``): a node folds its runs into
base once they reach a tenth of the base the fold would rewrite
(``major.change-ratio`` 0.1), which with deletion vectors is only the base files too
small for one (``deletion-vectors.min-file-bytes``) or too replaced; so at ten commits
a second every node folds each few hundred milliseconds, writing each change row into
base about once, instead of merging runs by size tiers first. Runs merge among
themselves once a node has ``minor.file-count`` (5; the default is 10) before a fold is due,
and ``major.interval-max`` (30 s) folds whatever is left. Five minutes at ten
commits a second of 2,000 random keys over 2M (the benchmark's load), against the
ratio of 1 the demo had before (bench/HISTORY.md, "Folding at every cycle"): a fifth less
rewritten (1.32x against 1.65x of the bytes committed), commit-to-compacted p95 3.4 s
against 29 s, the same read amplification (9 runs per node at p95).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from firn.api.catalog import Catalog
from firn.api.table import Table
from firn.catalog.amplification import CompactionWork, compaction_work
from firn.catalog.progress import (
    LatencySummary,
    ProgressReading,
    WrittenBytes,
    commit_points,
    last_plan_id,
    latency_summary,
    merge_points,
    read_progress,
    written_bytes,
)
from firn.errors import ConfigError, FirnError
from firn.model.properties import TableProperties

from .publication import PublicationCheck
from .workload import (
    PARTITION_BY,
    PRIMARY_KEY,
    SCHEMA,
    Distribution,
    ModelCheck,
    ReferenceModel,
    Workload,
    to_changes,
)

log = logging.getLogger(__name__)

DEMO_TABLE = "demo.orders"
DEMO_PROPERTIES: dict[str, Any] = {
    "change.buckets": 2,
    "base.buckets": 2,
    "major.change-ratio": 0.1,
    # One busy table, folding as soon as the ratio says: not a fleet's small tables,
    # whose runs collect first (the defaults, 64 KiB a node and 10 runs).
    "major.change-bytes-lowest": 0,
    "minor.file-count": 5,
    "major.interval-max": "30s",
    "target-file-size": "8MiB",
}
MiB = 1 << 20
PROGRESS_SECONDS = 1.0
"""At most one progress line per this many seconds."""


@dataclass(frozen=True)
class DemoOptions:
    """What ``firn up --demo`` produces; the CLI's options."""

    table: str = DEMO_TABLE
    rate: float = 2.0
    """Commits per second."""
    keys: int = 10_000
    """Order ids are drawn from ``0 .. keys - 1``."""
    batch: int = 100
    """Rows (operations) per commit."""
    delete_ratio: float = 0.1
    """Share of operations that delete a live order; the rest upsert one."""
    distribution: Distribution = "uniform"
    """How upserts pick their order ids (``workload.py``): uniform, ordered, skewed."""
    duration: float | None = None
    """Seconds of producing before the demo stops by itself; None: until stopped."""
    idle_seconds: float = 10.0
    """How long the services' idle CPU is measured before producing (0: not at all)."""
    seed: int | None = None
    """Seed of the workload's random numbers; None: a different run every time."""
    stall_wait: float | None = None
    """Honour back-pressure: a commit that finds a node at ``write.stall-runs`` waits
    up to this many seconds for compaction (``Table.commit(stall_wait=...)``), so the
    producer slows down instead of reads degrading; None: never wait."""
    carry: bool = False
    """Rows that fall due while the producer is behind (a commit that waited out a stall,
    or was slow) go into its next commit, up to a second's worth (``carry_limit``), as
    rows queued in a CDC source would: the rate asked for is kept, in fewer, larger
    commits. False: behind schedule it still commits ``batch`` rows at a time, so a
    stall costs rate."""
    properties: dict[str, Any] = field(default_factory=dict)
    """Table properties over ``DEMO_PROPERTIES`` (``--property KEY=VALUE``): set when the
    table is created, and on a kept table before producing."""

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ConfigError(f"the commit rate must be positive, got {self.rate}")
        if self.duration is not None and not self.duration > 0:
            raise ConfigError(f"the duration must be positive, got {self.duration}")
        if self.idle_seconds < 0:
            raise ConfigError(f"idle seconds must not be negative, got {self.idle_seconds}")
        if self.stall_wait is not None and self.stall_wait < 0:
            raise ConfigError(f"the stall wait must not be negative, got {self.stall_wait}")
        self.workload()  # validates the rest
        TableProperties.parse({**DEMO_PROPERTIES, **self.properties})

    def workload(self) -> Workload:
        return Workload(self.keys, self.batch, self.delete_ratio, self.distribution)

    @property
    def carry_limit(self) -> int:
        """The most rows one commit carries: a second's worth, at least a batch."""
        return max(self.batch, round(self.rate * self.batch))

    def rows_due(self, elapsed: float, produced: int) -> int:
        """With ``carry``, the rows the commit at ``elapsed`` seconds into the run takes
        when ``produced`` rows were committed before it: those the schedule (``batch``
        rows every ``1 / rate`` seconds, the first at 0) has made due, at least a batch
        and at most ``carry_limit``. Without it, a batch."""
        if not self.carry:
            return self.batch
        due = round((elapsed * self.rate + 1) * self.batch) - produced
        return min(max(due, self.batch), self.carry_limit)


@dataclass(frozen=True)
class Progress:
    """One progress line: the producer's counters and the catalog's."""

    elapsed: float
    commits: int
    rows: int
    """Change rows committed by this demo."""
    live_rows: int
    """Rows of the merged view, as the model has it."""
    reading: ProgressReading

    def as_dict(self) -> dict[str, Any]:
        r = self.reading
        shape = r.shape
        return {
            "event": "progress",
            "elapsed_s": round(self.elapsed, 1),
            "commits": self.commits,
            "rows": self.rows,
            "live_rows": self.live_rows,
            "unmerged_files": r.unmerged_files,
            "open_plans": r.open_plans,
            "tasks": r.tasks,
            "compactions": r.compacted,
            "compactions_by_kind": r.compactions,
            "last_compaction_wait_s": _round(r.last_compaction_wait),
            "unmerged_bytes": shape.unmerged_bytes,
            "live_bytes": shape.live_bytes,
            "base_bytes": shape.base_bytes,
            "base_rows": shape.base_rows,
            "runs_per_node": {
                "mean": _round(shape.mean_runs, 2),
                "p95": shape.p95_runs,
                "nodes": {str(runs): n for runs, n in shape.runs_per_node.items()},
            },
        }


_TASK_LABELS = {
    "Init": "init",
    "Pending": "pending",
    "Executing": "running",
    "Prepared": "prepared",
    "Committed": "done",
    "Failed": "failed",
    "Replaced": "replaced",
}


def format_progress(p: Progress) -> str:
    """The progress line for people, short enough for one terminal line."""
    r = p.reading
    tasks = " ".join(f"{_TASK_LABELS.get(s, s)} {n}" for s, n in r.tasks.items()) or "none"
    wait = "" if r.last_compaction_wait is None else f", last waited {r.last_compaction_wait:.1f}s"
    mean = r.shape.mean_runs
    runs = "" if mean is None else f" | runs/node {mean:.1f} (p95 {r.shape.p95_runs})"
    return (
        f"{p.elapsed:4.0f}s commits {p.commits} rows {p.rows:,} ({p.live_rows:,} live) | "
        f"unmerged files {r.unmerged_files} ({r.shape.unmerged_bytes / MiB:.1f} MiB){runs} | "
        f"plans {r.open_plans} | tasks {tasks} | compactions {r.compacted}{wait}"
    )


@dataclass(frozen=True)
class DemoResult:
    """What the producer did and what the table shows at the end."""

    seconds: float
    commits: int
    rows: int
    applied: dict[str, int]
    """Operations by effect: insert, update, delete, delete-absent."""
    reading: ProgressReading
    latency: LatencySummary
    check: ModelCheck
    written: WrittenBytes
    work: CompactionWork = field(default_factory=CompactionWork)
    """What this run's compaction tasks read and how long they executed."""
    stalled: int = 0
    """Commits that waited for compaction (``stall_wait``)."""
    stall_seconds: float = 0.0
    """Seconds those commits waited, in all."""
    error: str | None = None
    """Why producing stopped early, if it did."""
    publication: PublicationCheck | None = None
    """The Iceberg publication during the run (``publication.py``); None: not checked."""

    @property
    def ok(self) -> bool:
        """No error, the table equals the model, and the published Iceberg table does
        not differ from it (one that could not be compared is no failure)."""
        published = self.publication is None or self.publication.matches is not False
        return self.error is None and self.check.matches and published


def open_demo_table(catalog: Catalog, name: str, properties: dict[str, Any] | None = None) -> Table:
    """The demo table, created with the demo's schema and properties (``properties``
    over ``DEMO_PROPERTIES``) when missing; a kept table gets ``properties`` set."""
    if name not in catalog.tables():
        return catalog.create_table(
            name,
            SCHEMA,
            list(PRIMARY_KEY),
            list(PARTITION_BY),
            {**DEMO_PROPERTIES, **(properties or {})},
        )
    table = catalog.table(name)
    shape = [(f.name, f.type) for f in table.schema]
    if shape != [(f.name, f.type) for f in SCHEMA] or table.definition.primary_key != PRIMARY_KEY:
        raise ConfigError(
            f"table {name!r} exists with another schema or key; give the demo another "
            "table with --table"
        )
    if properties:
        table.set_properties(properties)
    return table


class DemoProducer:
    """Commits the workload to the demo table and keeps the reference model.

    The model starts as the table's current merged view, so a demo table kept from an
    earlier run is checked as well. Not thread-safe (it uses its catalog's connection)."""

    def __init__(self, catalog: Catalog, options: DemoOptions) -> None:
        self.catalog = catalog
        self.options = options
        self.table = open_demo_table(catalog, options.table, options.properties)
        self.model = ReferenceModel.from_table(self.table.read())
        # What this run adds is told apart from the table's history by these two.
        self.start_seq = read_progress(catalog.conn, self.table.table_id).seq
        self.start_plan = last_plan_id(catalog.conn, self.table.table_id)
        self.start_snapshot = self.table.current_snapshot()
        self.workload = options.workload()
        self.rng = random.Random(options.seed)
        self.commits = 0
        self.rows = 0
        self.seconds = 0.0
        """Seconds spent in ``run``."""
        self.stalled = 0
        self.stall_seconds = 0.0
        self.error: str | None = None

    def commit_batch(self, rows: int | None = None) -> int:
        """Draw one batch (``rows`` operations, default the workload's batch), commit it,
        and apply it to the model once it landed."""
        ops = self.workload.next_batch(self.model, self.rng, rows)
        committed = self.table.commit(to_changes(ops), stall_wait=self.options.stall_wait)
        self.model.apply(ops)
        self.commits += 1
        self.rows += len(ops)
        if committed.waited:
            self.stalled += 1
            self.stall_seconds += committed.waited
        return committed

    def progress(self) -> Progress:
        return Progress(
            elapsed=self.seconds,
            commits=self.commits,
            rows=self.rows,
            live_rows=len(self.model),
            reading=read_progress(self.catalog.conn, self.table.table_id, self.start_plan),
        )

    def run(
        self,
        stopping: threading.Event,
        duration: float | None,
        show: Callable[[Progress], None],
    ) -> None:
        """Commit at ``options.rate`` until ``stopping`` is set or ``duration`` has
        passed, showing progress at most once a second. A commit that fails ends the
        run (``error``); the commits before it stand. Behind schedule, it commits as
        fast as it can but never bursts to catch up more than one commit; with
        ``carry`` each of those commits takes the rows fallen due meanwhile."""
        interval = 1.0 / self.options.rate
        before = self.seconds  # earlier runs of this producer
        rows_before = self.rows
        began = time.monotonic()
        deadline = None if duration is None else began + duration
        next_commit = next_show = began
        try:
            while not stopping.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if now >= next_commit:
                    due = self.options.rows_due(now - began, self.rows - rows_before)
                    try:
                        self.commit_batch(due)
                    except FirnError as exc:
                        self.error = f"commit {self.commits + 1} failed: {exc}"
                        log.error("%s", self.error)
                        break
                    next_commit = max(next_commit + interval, time.monotonic() - interval)
                if time.monotonic() >= next_show:
                    self.seconds = before + time.monotonic() - began
                    show(self.progress())
                    next_show = time.monotonic() + PROGRESS_SECONDS
                wake = min(next_commit, next_show)
                if deadline is not None:
                    wake = min(wake, deadline)
                stopping.wait(max(0.0, wake - time.monotonic()))
        finally:
            self.seconds = before + time.monotonic() - began

    def finish(self) -> DemoResult:
        """Read the table, compare it with the model, and sum up the latencies."""
        conn, table_id = self.catalog.conn, self.table.table_id
        check = self.model.compare(self.table.read())
        latency = latency_summary(
            commit_points(conn, table_id, self.start_seq), merge_points(conn, table_id)
        )
        return DemoResult(
            seconds=self.seconds,
            commits=self.commits,
            rows=self.rows,
            applied=dict(self.model.applied),
            reading=read_progress(conn, table_id, self.start_plan),
            latency=latency,
            check=check,
            written=written_bytes(conn, table_id, self.start_snapshot),
            work=compaction_work(conn, table_id, self.start_plan),
            stalled=self.stalled,
            stall_seconds=self.stall_seconds,
            error=self.error,
        )


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
