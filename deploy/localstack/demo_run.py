"""Running the demo inside ``firn up``: measure the idle stack, produce with live
progress until stopped, then print the summary.

The summary is built once as JSON data and rendered as text from that data, so
``--json`` and the text cannot disagree.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import IO, Any

import firn
from firn.commands.output import columns
from firn.settings import FirnSettings

from .demo import DemoOptions, DemoProducer, DemoResult, Progress, format_progress
from .publication import CATCH_UP_SECONDS, check_publication
from .usage import Usage, delta, read_all

MiB = 1 << 20


def run_demo(
    settings: FirnSettings,
    options: DemoOptions,
    stopping: threading.Event,
    processes: Callable[[], Mapping[str, int]],
    *,
    as_json: bool = False,
) -> int:
    """The whole demo against a started stack; 0 when the table matched the model.

    ``processes`` gives the stack's process ids by name (services, Postgres, Kafka)
    as they are now (the supervisor restarts services that exit); this process, the
    producer, is measured too, without its children."""

    def pids() -> dict[str, int]:
        return {**processes(), "producer": os.getpid()}

    began = time.monotonic()
    with firn.connect(settings=settings) as catalog:
        producer = DemoProducer(catalog, options)
        _say(
            f"producing into {options.table}: {options.rate:g} commits/s of "
            f"{options.batch} rows over {options.keys:,} keys ({options.distribution}), "
            f"{options.delete_ratio:.0%} deletes"
            + (f", for {options.duration:g}s" if options.duration else "; Ctrl-C stops"),
            as_json,
        )
        idle = None
        if options.idle_seconds > 0 and not stopping.is_set():
            _say(f"measuring the idle stack for {options.idle_seconds:g}s first", as_json)
            idle = _window(pids, lambda: stopping.wait(options.idle_seconds))
        printer = ProgressPrinter(as_json)
        try:
            load = _window(pids, lambda: producer.run(stopping, options.duration, printer.show))
        finally:
            printer.close()
        _say("stopped producing; checking the table against the model", as_json)
        result = producer.finish()
        _say(
            "waiting for the published Iceberg table to show the newest compaction "
            f"(at most {CATCH_UP_SECONDS:g}s)",
            as_json,
        )
        publication = check_publication(
            settings,
            catalog,
            producer.table,
            producer.start_snapshot,
            window=time.monotonic() - began,
        )
        result = replace(result, publication=publication)
    data = summary_data(result, options.table, idle, load)
    print(json.dumps(data) if as_json else summary_text(data), flush=True)
    if not result.ok and not as_json:
        problem = result.error or (
            "the table differs from the reference model"
            if not result.check.matches
            else "the published Iceberg table differs from the table"
        )
        print(f"firn: error: {problem}", file=sys.stderr, flush=True)
    return 0 if result.ok else 1


def _window(pids: Callable[[], Mapping[str, int]], during: Callable[[], object]) -> ResourceWindow:
    """What each process tree used while ``during`` ran."""
    before = read_all(pids(), own="producer")
    began = time.monotonic()
    during()
    seconds = time.monotonic() - began
    return ResourceWindow(seconds, before, read_all(pids(), own="producer"))


def _say(message: str, as_json: bool) -> None:
    if not as_json:
        print(f"firn demo: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ResourceWindow:
    """Readings of each process tree at the start and end of one window."""

    seconds: float
    before: dict[str, Usage]
    after: dict[str, Usage]

    def as_dict(self) -> dict[str, dict[str, float | int]]:
        cpu = delta(self.before, self.after)
        return {
            name: {
                "cpu_s": round(used, 2),
                "cores": round(used / self.seconds, 3) if self.seconds > 0 else 0.0,
                "rss_mib": round(self.after[name].rss_bytes / MiB, 1),
                "peak_rss_mib": round(self.after[name].peak_rss_bytes / MiB, 1),
                "processes": self.after[name].processes,
            }
            for name, used in cpu.items()
        }


def summary_data(
    result: DemoResult,
    table: str,
    idle: ResourceWindow | None,
    load: ResourceWindow | None,
) -> dict[str, Any]:
    check = result.check
    return {
        "event": "summary",
        "ok": result.ok,
        "table": table,
        "seconds": round(result.seconds, 1),
        "commits": result.commits,
        "commits_per_s": round(result.commits / result.seconds, 2) if result.seconds else 0.0,
        "rows": result.rows,
        "operations": result.applied,
        "live_rows": check.expected_rows,
        "compactions": result.reading.compactions,
        "latency": result.latency.as_dict(),
        "written": result.written.as_dict(),
        "compaction_work": result.work.as_dict(),
        "back_pressure": {
            "stalled_commits": result.stalled,
            "stall_seconds": round(result.stall_seconds, 1),
        },
        "unmerged_files": result.reading.unmerged_files,
        "model_check": {
            "matches": check.matches,
            "expected_rows": check.expected_rows,
            "actual_rows": check.actual_rows,
            "missing": check.missing,
            "unexpected": check.unexpected,
            "different": check.different,
            "examples": list(check.examples),
        },
        "resources": {
            "idle": None
            if idle is None
            else {"seconds": round(idle.seconds, 1), "processes": idle.as_dict()},
            "load": None
            if load is None
            else {"seconds": round(load.seconds, 1), "processes": load.as_dict()},
        },
        "publication": None if result.publication is None else result.publication.as_dict(),
        "error": result.error,
    }


def summary_text(data: dict[str, Any]) -> str:
    ops = data["operations"]
    kinds = ", ".join(f"{kind} {n}" for kind, n in data["compactions"].items())
    lines = [
        f"firn demo: {data['commits']} commits in {data['seconds']}s "
        f"({data['commits_per_s']}/s), {data['rows']:,} change rows: "
        f"{ops.get('insert', 0):,} inserts, {ops.get('update', 0):,} updates, "
        f"{ops.get('delete', 0):,} deletes",
        f"  table        {data['table']}: {data['live_rows']:,} live rows, "
        f"{data['unmerged_files']} unmerged change files left",
        f"  compactions  {sum(data['compactions'].values())} committed"
        f"{f' ({kinds})' if kinds else ''}",
        f"  latency      {_latency_text(data['latency'])}",
        f"  written      {_written_text(data['written'])}",
        f"  compaction   {_work_text(data['compaction_work'])}",
        *_stall_text(data["back_pressure"]),
        f"  model check  {_check_text(data['model_check'])}",
        f"  published    {_publication_text(data.get('publication'))}",
    ]
    if data["error"]:
        lines.append(f"  error        {data['error']}")
    lines += _resources_text(data["resources"])
    return "\n".join(lines)


def _latency_text(latency: dict[str, Any]) -> str:
    waiting = f"; {latency['waiting']} still waiting" if latency["waiting"] else ""
    if not latency["compacted"]:
        return f"commit to compacted: nothing compacted yet{waiting}"
    return (
        f"commit to compacted over {latency['compacted']} (commit, partition) pairs: "
        f"median {latency['median_s']:.1f}s, p95 {latency['p95_s']:.1f}s, "
        f"max {latency['max_s']:.1f}s{waiting}"
    )


def _stall_text(back_pressure: dict[str, Any]) -> list[str]:
    if not back_pressure["stalled_commits"]:
        return []
    return [
        f"  stalls       {back_pressure['stalled_commits']} commits waited for compaction, "
        f"{back_pressure['stall_seconds']:.1f}s in all (write.stall-runs reached)"
    ]


def _written_text(written: dict[str, Any]) -> str:
    amplification = written["amplification"]
    ratio = "" if amplification is None else f": write amplification {amplification:.2f}x"
    return (
        f"{written['committed_bytes'] / MiB:.1f} MiB committed, "
        f"{written['compacted_bytes'] / MiB:.1f} MiB rewritten by compactions{ratio}"
    )


def _work_text(work: dict[str, Any]) -> str:
    if not work["tasks"]:
        return "no task finished yet"
    return (
        f"{work['tasks']} tasks read {work['input_bytes'] / MiB:.1f} MiB in "
        f"{work['busy_seconds']:.1f}s of executing (wall time, batches overlap): "
        f"{work['bytes_per_busy_s'] / MiB:.1f} MiB/s"
    )


def _check_text(check: dict[str, Any]) -> str:
    if check["matches"]:
        return f"read() equals the reference model ({check['actual_rows']:,} rows)"
    return (
        f"read() DIFFERS from the reference model: {check['expected_rows']:,} rows expected, "
        f"{check['actual_rows']:,} read; {check['missing']} missing, "
        f"{check['unexpected']} unexpected, {check['different']} different "
        f"(e.g. order ids {', '.join(map(str, check['examples']))})"
    )


def _publication_text(publication: dict[str, Any] | None) -> str:
    if publication is None:
        return "not checked"
    n = publication["publications"]
    if n:
        published = (
            f"{n} Iceberg snapshot{'s' if n != 1 else ''}, "
            f"lag median {publication['lag_p50_s']:.1f}s, p95 {publication['lag_p95_s']:.1f}s, "
            f"max {publication['lag_max_s']:.1f}s"
        )
    else:
        published = "no Iceberg snapshot published during the run"
    snapshot = publication["firn_snapshot"]
    differences = publication["differences"]
    if publication["matches"]:
        rows = publication["rows"]
        verdict = (
            f"published table equals the table ({rows:,} rows, as folded at snapshot {snapshot})"
        )
    elif publication["matches"] is False and differences is not None:
        examples = ", ".join(map(str, differences["examples"]))
        verdict = (
            f"published table DIFFERS from the table as folded at snapshot {snapshot}: "
            f"{differences['expected_rows']:,} rows expected, {publication['rows']:,} read; "
            f"{differences['missing']} missing, {differences['unexpected']} unexpected, "
            f"{differences['different']} different (e.g. order ids {examples})"
        )
    else:
        verdict = f"published table not compared: {publication['error'] or 'no reason given'}"
    return f"{published}; {verdict}"


def _resources_text(resources: dict[str, Any]) -> list[str]:
    idle, load = resources["idle"], resources["load"]
    if idle is None and load is None:
        return ["  resources    not measured (no /proc)"]
    names = list((load or idle)["processes"])
    rows = []
    for name in names:
        i = (idle or {}).get("processes", {}).get(name)
        lo = (load or {}).get("processes", {}).get(name)
        idle_cells = [i["cpu_s"], i["cores"], i["rss_mib"]] if i else ["-"] * 3
        load_cells = (
            [lo["cpu_s"], lo["cores"], lo["peak_rss_mib"], lo["processes"]] if lo else ["-"] * 4
        )
        rows.append([name, *idle_cells, *load_cells])
    idle_s = f"{idle['seconds']}s" if idle else "-"
    load_s = f"{load['seconds']}s" if load else "-"
    table = columns(
        [
            "process",
            "idle CPU s",
            "cores",
            "RSS MiB",
            "load CPU s",
            "cores",
            "peak RSS MiB",
            "procs",
        ],
        rows,
    )
    return [
        f"  resources    idle {idle_s} before producing, load while producing {load_s} "
        "(each process with its children; peak = sum of their VmHWM)",
        *(f"    {line}" for line in table.splitlines()),
    ]


class ProgressPrinter:
    """Progress lines: JSON objects on stdout with ``--json``; else text on stderr,
    rewritten in place on a terminal, one line each otherwise."""

    def __init__(self, as_json: bool, out: IO[str] | None = None, err: IO[str] | None = None):
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.in_place = not as_json and self.err.isatty()
        self._open = False

    def show(self, progress: Progress) -> None:
        if self.as_json:
            print(json.dumps(progress.as_dict()), file=self.out, flush=True)
            return
        line = format_progress(progress)
        if self.in_place:
            width = shutil.get_terminal_size().columns - 1
            self.err.write("\r\x1b[K" + line[:width])
            self.err.flush()
            self._open = True
        else:
            print(f"firn demo: {line}", file=self.err, flush=True)

    def close(self) -> None:
        """End an in-place line so what follows starts on a line of its own."""
        if self._open:
            self.err.write("\n")
            self.err.flush()
            self._open = False
