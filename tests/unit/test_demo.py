"""The pure parts of ``firn up --demo``: the commit-to-compacted latency rule, the
progress line, the summary and the CLI options (the workload and its reference model
are in ``test_demo_workload.py``)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import psutil
import pytest

from firn.catalog.amplification import CompactionWork, StoreShape
from firn.catalog.progress import (
    CommitPoint,
    LatencySummary,
    MergePoint,
    ProgressReading,
    WrittenBytes,
    latency_summary,
    percentile,
)
from firn.cli import build_parser, main
from firn.errors import ConfigError
from firn_localstack import usage
from firn_localstack.demo import DemoOptions, DemoResult, Progress, format_progress
from firn_localstack.demo_run import ProgressPrinter, ResourceWindow, summary_data, summary_text
from firn_localstack.publication import PublicationCheck
from firn_localstack.workload import DISTRIBUTIONS, ModelCheck

T0 = dt.datetime(2024, 6, 1, 12, 0, tzinfo=dt.UTC)


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# -- latency ----------------------------------------------------------------------


def test_latency_is_commit_to_the_first_merge_reaching_its_seq() -> None:
    commits = [
        CommitPoint("day=a", 1, _at(0)),
        CommitPoint("day=b", 1, _at(0)),
        CommitPoint("day=a", 2, _at(1)),
        CommitPoint("day=a", 3, _at(2)),
        CommitPoint("day=b", 3, _at(2)),
        CommitPoint("day=a", 4, _at(3)),  # not compacted yet
        CommitPoint("day=c", 4, _at(3)),  # a partition never compacted
    ]
    merges = [
        MergePoint("day=a", 10, 2, _at(5)),  # folds a:1 (5s) and a:2 (4s)
        MergePoint("day=b", 11, 3, _at(6)),  # folds b:1 (6s) and b:3 (4s)
        MergePoint("day=a", 12, 3, _at(12)),  # folds a:3 (10s)
    ]
    summary = latency_summary(commits, reversed(merges))
    assert summary == LatencySummary(compacted=5, waiting=2, median=5.0, p95=10.0, max=10.0)
    assert summary.as_dict() == {
        "compacted": 5,
        "waiting": 2,
        "median_s": 5.0,
        "p95_s": 10.0,
        "max_s": 10.0,
    }


def test_latency_without_compactions_has_no_statistics() -> None:
    summary = latency_summary([CommitPoint("", 1, T0)], [])
    assert summary == LatencySummary(compacted=0, waiting=1)
    assert summary.as_dict()["median_s"] is None


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.95) == 95
    assert percentile(values, 0.5) == 50
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([1, 2], 0.95) == 2


# -- progress and summary ---------------------------------------------------------

READING = ProgressReading(
    seq=84,
    unmerged_files=23,
    open_plans=2,
    tasks={"Pending": 1, "Executing": 2, "Committed": 40},
    compactions={"major": 15, "minor": 2},
    last_compaction_wait=6.24,
    shape=StoreShape(
        live_bytes=9 << 20,
        base_bytes=6 << 20,
        base_rows=90_000,
        unmerged_bytes=3 << 19,
        runs_per_node={1: 2, 3: 5, 7: 1},
    ),
)


def test_progress_line() -> None:
    progress = Progress(elapsed=42.3, commits=84, rows=16800, live_rows=9321, reading=READING)
    assert format_progress(progress) == (
        "  42s commits 84 rows 16,800 (9,321 live) | unmerged files 23 (1.5 MiB) | "
        "runs/node 3.0 (p95 7) | plans 2 | tasks pending 1 running 2 done 40 | "
        "compactions 17, last waited 6.2s"
    )
    assert progress.as_dict() == {
        "event": "progress",
        "elapsed_s": 42.3,
        "commits": 84,
        "rows": 16800,
        "live_rows": 9321,
        "unmerged_files": 23,
        "open_plans": 2,
        "tasks": {"Pending": 1, "Executing": 2, "Committed": 40},
        "compactions": 17,
        "compactions_by_kind": {"major": 15, "minor": 2},
        "last_compaction_wait_s": 6.2,
        "unmerged_bytes": 3 << 19,
        "live_bytes": 9 << 20,
        "base_bytes": 6 << 20,
        "base_rows": 90_000,
        "runs_per_node": {"mean": 3.0, "p95": 7, "nodes": {"1": 2, "3": 5, "7": 1}},
    }
    assert json.loads(json.dumps(progress.as_dict())) == progress.as_dict()
    quiet = Progress(0.0, 0, 0, 0, ProgressReading(seq=0, unmerged_files=0, open_plans=0))
    assert format_progress(quiet).endswith(
        "unmerged files 0 (0.0 MiB) | plans 0 | tasks none | compactions 0"
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_rewritten_in_place_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "get_terminal_size", lambda: os.terminal_size((61, 24)))
    progress = Progress(elapsed=1.0, commits=2, rows=200, live_rows=150, reading=READING)
    terminal = _Terminal()
    printer = ProgressPrinter(as_json=False, out=io.StringIO(), err=terminal)
    printer.show(progress)
    printer.show(progress)
    printer.close()
    printer.close()
    line = format_progress(progress)
    # Cut to the terminal's width: a wrapped line could not be rewritten in place.
    assert terminal.getvalue() == f"\r\x1b[K{line[:60]}" * 2 + "\n"

    log = io.StringIO()
    printer = ProgressPrinter(as_json=False, out=io.StringIO(), err=log)
    printer.show(progress)
    printer.close()
    assert log.getvalue() == f"firn demo: {line}\n"

    out, err = io.StringIO(), _Terminal()
    printer = ProgressPrinter(as_json=True, out=out, err=err)
    printer.show(progress)
    printer.close()
    assert json.loads(out.getvalue()) == progress.as_dict()
    assert err.getvalue() == ""


def _usage(cpu: float, rss: int, peak: int) -> usage.Usage:
    return usage.Usage(cpu_seconds=cpu, rss_bytes=rss << 20, peak_rss_bytes=peak << 20, processes=2)


def test_summary_data_and_text_agree() -> None:
    result = DemoResult(
        seconds=90.0,
        commits=180,
        rows=18000,
        applied={"insert": 1000, "update": 15200, "delete": 1800},
        reading=READING,
        latency=LatencySummary(compacted=700, waiting=12, median=6.1, p95=13.04, max=17.2),
        check=ModelCheck(
            expected_rows=9012, actual_rows=9012, missing=0, unexpected=0, different=0
        ),
        written=WrittenBytes(committed=40 << 20, compacted=90 << 20),
        work=CompactionWork(
            tasks=50,
            input_bytes=120 << 20,
            task_seconds=60.0,
            busy_seconds=24.0,
            base_bytes=60 << 20,
            base_files=50,
            change_files=400,
        ),
        stalled=3,
        stall_seconds=4.25,
        publication=PublicationCheck.of_lags(
            [2.0, 1.5, 3.25, 9.5, 2.5],
            firn_snapshot=812,
            check=ModelCheck(9012, 9012, missing=0, unexpected=0, different=0),
        ),
    )
    idle = ResourceWindow(10.0, {"planner": _usage(1.0, 90, 95)}, {"planner": _usage(1.5, 91, 96)})
    load = ResourceWindow(
        90.0, {"planner": _usage(2.0, 91, 96)}, {"planner": _usage(11.0, 120, 130)}
    )
    data = summary_data(result, "demo.orders", idle, load)
    assert data["ok"] is True
    assert data["latency"] == {
        "compacted": 700,
        "waiting": 12,
        "median_s": 6.1,
        "p95_s": 13.04,
        "max_s": 17.2,
    }
    assert data["resources"]["idle"]["processes"]["planner"]["cpu_s"] == 0.5
    assert data["resources"]["load"]["processes"]["planner"] == {
        "cpu_s": 9.0,
        "cores": 0.1,
        "rss_mib": 120.0,
        "peak_rss_mib": 130.0,
        "processes": 2,
    }
    text = summary_text(json.loads(json.dumps(data)))
    assert "180 commits in 90.0s (2.0/s)" in text
    assert "median 6.1s, p95 13.0s, max 17.2s; 12 still waiting" in text
    assert "compactions  17 committed (major 15, minor 2)" in text
    assert "read() equals the reference model (9,012 rows)" in text
    assert "23 unmerged change files left" in text
    assert (
        "40.0 MiB committed, 90.0 MiB rewritten by compactions: write amplification 3.25x" in text
    )
    assert data["written"]["amplification"] == 3.25
    assert data["compaction_work"] == {
        "tasks": 50,
        "input_bytes": 120 << 20,
        "mean_task_input_bytes": round((120 << 20) / 50),
        "base_share": 0.5,
        "mean_task_base_files": 1.0,
        "mean_task_change_files": 8.0,
        "task_seconds": 60.0,
        "busy_seconds": 24.0,
        "bytes_per_busy_s": 5 << 20,
    }
    assert "50 tasks read 120.0 MiB in 24.0s of executing" in text
    assert "5.0 MiB/s" in text
    assert any(line.split()[:3] == ["planner", "0.5", "0.05"] for line in text.splitlines())
    assert data["back_pressure"] == {"stalled_commits": 3, "stall_seconds": 4.2}
    assert "stalls       3 commits waited for compaction, 4.2s in all" in text
    assert data["publication"] == {
        "publications": 5,
        "lag_p50_s": 2.5,
        "lag_p95_s": 9.5,
        "lag_max_s": 9.5,
        "matches": True,
        "firn_snapshot": 812,
        "rows": 9012,
        "differences": None,
        "error": None,
    }
    assert (
        "  published    5 Iceberg snapshots, lag median 2.5s, p95 9.5s, max 9.5s; "
        "published table equals the table (9,012 rows, as folded at snapshot 812)"
    ) in text.splitlines()

    bad = DemoResult(
        seconds=1.0,
        commits=1,
        rows=1,
        applied={},
        reading=READING,
        latency=LatencySummary(compacted=0, waiting=1),
        check=ModelCheck(4, 3, missing=1, unexpected=0, different=0, examples=(2,)),
        written=WrittenBytes(committed=0, compacted=0),
    )
    data = summary_data(bad, "demo.orders", None, None)
    assert data["ok"] is False
    text = summary_text(data)
    assert "read() DIFFERS from the reference model" in text
    assert "nothing compacted yet; 1 still waiting" in text
    assert "not measured" in text
    assert "compaction   no task finished yet" in text
    assert "stalls" not in text, "a run that never waited says nothing of stalls"
    assert data["publication"] is None
    assert "  published    not checked" in text.splitlines()


def _published(publication: PublicationCheck) -> tuple[DemoResult, str]:
    result = DemoResult(
        seconds=10.0,
        commits=20,
        rows=2000,
        applied={"insert": 2000},
        reading=READING,
        latency=LatencySummary(compacted=0, waiting=20),
        check=ModelCheck(2000, 2000, missing=0, unexpected=0, different=0),
        written=WrittenBytes(committed=0, compacted=0),
        publication=publication,
    )
    data = summary_data(result, "demo.orders", None, None)
    line = next(x for x in summary_text(data).splitlines() if x.startswith("  published "))
    return result, line


def test_a_published_table_that_differs_fails_the_demo() -> None:
    differs = PublicationCheck.of_lags(
        [4.0],
        firn_snapshot=31,
        check=ModelCheck(2000, 1999, missing=2, unexpected=1, different=3, examples=(5, 8)),
    )
    result, line = _published(differs)
    assert result.ok is False
    assert summary_data(result, "demo.orders", None, None)["publication"]["differences"] == {
        "expected_rows": 2000,
        "missing": 2,
        "unexpected": 1,
        "different": 3,
        "examples": [5, 8],
    }
    assert line == (
        "  published    1 Iceberg snapshot, lag median 4.0s, p95 4.0s, max 4.0s; "
        "published table DIFFERS from the table as folded at snapshot 31: 2,000 rows "
        "expected, 1,999 read; 2 missing, 1 unexpected, 3 different (e.g. order ids 5, 8)"
    )


def test_a_publication_that_could_not_be_compared_says_why_and_fails_nothing() -> None:
    behind = PublicationCheck.of_lags(
        [],
        firn_snapshot=7,
        error="the Iceberg table demo.orders did not show the newest compaction "
        "(snapshot 40) within 30s: it shows snapshot 7",
    )
    result, line = _published(behind)
    assert result.ok is True
    data = summary_data(result, "demo.orders", None, None)["publication"]
    assert data["matches"] is None
    assert data["lag_p95_s"] is None
    assert data["publications"] == 0
    assert line == (
        "  published    no Iceberg snapshot published during the run; published table not "
        "compared: the Iceberg table demo.orders did not show the newest compaction "
        "(snapshot 40) within 30s: it shows snapshot 7"
    )


def test_publication_lags_are_nearest_rank_percentiles() -> None:
    lags = [float(n) for n in range(1, 21)]  # 1 .. 20 seconds
    check = PublicationCheck.of_lags(lags)
    assert (check.publications, check.lag_p50, check.lag_p95, check.lag_max) == (20, 10, 19, 20)
    assert check.matches is None
    assert check.as_dict()["rows"] is None


# -- process usage through psutil -------------------------------------------------


class _FakeProcess:
    """psutil.Process over a table of fake processes: pid -> (cpu times, rss, kids)."""

    table: ClassVar[dict[int, tuple[tuple[float, float, float, float], int, list[int]]]] = {}

    def __init__(self, pid: int) -> None:
        if pid not in self.table:
            raise psutil.NoSuchProcess(pid)
        self.pid = pid

    def children(self, recursive: bool = False) -> list[_FakeProcess]:
        assert recursive
        kids = [_FakeProcess(k) for k in self.table[self.pid][2]]
        return [d for k in kids for d in [k, *k.children(recursive=True)]]

    def oneshot(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def cpu_times(self) -> SimpleNamespace:
        user, system, children_user, children_system = self.table[self.pid][0]
        return SimpleNamespace(
            user=user, system=system, children_user=children_user, children_system=children_system
        )

    def memory_info(self) -> SimpleNamespace:
        return SimpleNamespace(rss=self.table[self.pid][1])


def test_process_trees_are_read_through_psutil(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usage.psutil, "Process", _FakeProcess)
    monkeypatch.setattr(_FakeProcess, "table", {
        10: ((1.0, 0.5, 0.3, 0.2), 1000 << 10, [11]),
        11: ((2.0, 0.0, 0.0, 0.0), 3000 << 10, [12]),
        12: ((0.1, 0.1, 0.0, 0.0), 24 << 10, []),
    })  # fmt: skip
    monkeypatch.setattr(usage, "_PROC", tmp_path)
    for pid, hwm_kb in ((10, 2000), (11, 5000)):  # 12 has none: its rss now stands in
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "status").write_text(
            f"Name:\tx\nVmHWM:\t{hwm_kb} kB\nVmRSS:\t1 kB\n"
        )
    tree = usage.read_usage(10)
    assert tree is not None
    assert tree.cpu_seconds == pytest.approx(4.2)
    assert (tree.rss_bytes, tree.peak_rss_bytes, tree.processes) == (4024 << 10, 7024 << 10, 3)
    own = usage.read_usage(10, tree=False)
    assert own is not None
    assert (own.cpu_seconds, own.processes) == (1.5, 1)
    assert usage.read_usage(99) is None
    readings = usage.read_all({"svc": 10, "me": 11, "gone": 99}, own="me")
    assert set(readings) == {"svc", "me"}
    assert readings["me"].processes == 1
    later = {"svc": usage.Usage(5.0, 0, 0, 3)}
    assert usage.delta(readings, later) == {"svc": pytest.approx(0.8)}


def test_this_process_is_measured_for_real() -> None:
    me = usage.read_usage(os.getpid(), tree=False)
    assert me is not None
    assert me.processes == 1
    assert me.rss_bytes > 0
    assert usage.peak_rss(os.getpid()) > 0  # VmHWM read on Linux
    assert me.cpu_seconds > 0


# -- CLI --------------------------------------------------------------------------


def test_demo_options_are_parsed() -> None:
    argv = "up --demo --rate 5 --keys 100 --batch 10 --delete-ratio 0 --duration 30"
    args = build_parser().parse_args([*argv.split(), "--idle-seconds", "0", "--seed", "3"])
    assert (args.demo, args.rate, args.keys, args.batch) == (True, 5.0, 100, 10)
    assert (args.delete_ratio, args.duration, args.idle_seconds, args.seed) == (0.0, 30.0, 0.0, 3)
    assert args.distribution is None  # DemoOptions' default: uniform
    for name in DISTRIBUTIONS:
        args = build_parser().parse_args(["up", "--demo", "--distribution", name])
        assert args.distribution == name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--demo", "--distribution", "zipf"])
    with pytest.raises(ConfigError, match="unknown key distribution"):
        DemoOptions(distribution="zipf")  # type: ignore[arg-type]
    assert DemoOptions().rate == 2.0
    with pytest.raises(ConfigError, match="rate"):
        DemoOptions(rate=0)
    with pytest.raises(ConfigError, match="delete ratio"):
        DemoOptions(delete_ratio=1.5)
    args = build_parser().parse_args(["demo", "--stall-wait", "30"])
    assert args.stall_wait == 30.0
    assert DemoOptions().stall_wait is None  # never waits unless asked
    with pytest.raises(ConfigError, match="stall wait"):
        DemoOptions(stall_wait=-1)
    assert build_parser().parse_args(["demo", "--carry"]).carry is True
    assert build_parser().parse_args(["demo"]).carry is None  # DemoOptions' default: False


def test_a_carrying_producer_puts_the_rows_fallen_due_into_its_next_commit() -> None:
    carrying = DemoOptions(rate=10, batch=100, carry=True)
    # On schedule (commit k at k / rate seconds, k commits before it): one batch.
    assert [carrying.rows_due(k / 10, 100 * k) for k in range(5)] == [100] * 5
    # 0.35 s late for the commit due at 1.0 s: the 3.5 batches fallen due meanwhile too.
    assert carrying.rows_due(1.35, 1000) == 450
    # Ahead of the schedule (rows carried earlier): still a batch, never none.
    assert carrying.rows_due(1.0, 1500) == 100
    # Five seconds behind: at most a second's worth in one commit, the rest after it.
    assert carrying.carry_limit == 1000
    assert carrying.rows_due(6.0, 1000) == 1000
    assert carrying.rows_due(6.0, 2000) == 1000
    assert carrying.rows_due(6.0, 5500) == 600
    # A slow rate still carries at least a batch at a time.
    assert DemoOptions(rate=0.5, batch=100, carry=True).carry_limit == 100
    # Without carrying, a batch whatever the lag: a stall costs rate.
    assert DemoOptions(rate=10, batch=100).rows_due(6.0, 1000) == 100


def test_demo_table_properties_are_parsed_and_checked_before_starting() -> None:
    argv = [
        "up",
        "--demo",
        "--property",
        "minor.file-count=8",
        "--property",
        "major.change-ratio=2",
    ]
    args = build_parser().parse_args(argv)
    assert args.properties == ["minor.file-count=8", "major.change-ratio=2"]
    assert DemoOptions(properties={"minor.file-count": "8"}).properties == {"minor.file-count": "8"}
    with pytest.raises(ConfigError, match=r"minor\.file-count"):
        DemoOptions(properties={"minor.file-count": "0"})
    with pytest.raises(ConfigError, match=r"no\.such"):
        DemoOptions(properties={"no.such": "1"})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["up", "--rate", "3", "--keys", "9"], "--rate, --keys only apply with --demo"),
        (["up", "--demo", "--no-services"], "--demo needs the services"),
        (["up", "--property", "minor.file-count=8"], "--property only apply with --demo"),
        (["up", "--demo", "--property", "minor.file-count"], "--property takes KEY=VALUE"),
        (["up", "--demo", "--property", "minor.file-count=0"], "minor.file-count"),
    ],
)
def test_demo_option_conflicts_fail_before_starting_anything(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIRN_HOME", "/nonexistent/firn-home")
    assert main([*argv, "--json"]) == 1
    assert message in json.loads(capsys.readouterr().out)["error"]


def test_secure_kafka_with_a_broker_of_ones_own_fails_before_starting_anything(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRN_HOME", "/nonexistent/firn-home")
    monkeypatch.setenv("FIRN_KAFKA_BOOTSTRAP", "broker:9092")
    assert main(["up", "--secure-kafka", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert "FIRN_KAFKA_BOOTSTRAP names another" in error
    assert "firn kafka-acls --users" in error
