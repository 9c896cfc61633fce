"""CPU time and memory of the stack's processes, read through psutil.

A process is measured with everything it started (psutil's recursive children):
the dispatcher with its Spark JVM and that JVM's Python workers, Postgres with its
backends. CPU time is user + system time of every live process of the tree plus
what their exited, reaped children used, so a difference of two readings is the CPU
the tree used in between. ``rss`` is the resident set size now; ``peak_rss`` the sum
of each live process's own high-water mark, an upper bound of the tree's true peak
since its processes need not peak at the same moment. psutil has no high-water mark,
so that one figure is ``VmHWM`` from ``/proc/PID/status`` (Linux; elsewhere the
resident size now stands in for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

_PROC = Path("/proc")


@dataclass(frozen=True)
class Usage:
    """One reading of a process tree."""

    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int
    processes: int


def read_usage(pid: int, *, tree: bool = True) -> Usage | None:
    """``pid`` and (with ``tree``) its descendants now; None if it is gone or cannot
    be read. Without ``tree`` only the process's own threads count."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)] if tree else [root]
    except psutil.Error:
        return None
    cpu, rss, peak, count = 0.0, 0, 0, 0
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                now = process.memory_info().rss
        except psutil.Error:  # exited while we looked
            continue
        cpu += times.user + times.system
        if tree:
            cpu += times.children_user + times.children_system
        rss += now
        peak += max(now, peak_rss(process.pid))
        count += 1
    return Usage(cpu_seconds=cpu, rss_bytes=rss, peak_rss_bytes=peak, processes=count)


def read_all(pids: Mapping[str, int], *, own: str | None = None) -> dict[str, Usage]:
    """A reading per named process tree; ``own`` names this process, measured
    without its children (which are the services)."""
    readings = {name: read_usage(pid, tree=name != own) for name, pid in pids.items()}
    return {name: usage for name, usage in readings.items() if usage is not None}


def peak_rss(pid: int) -> int:
    """``VmHWM`` of ``pid`` in bytes; 0 where it cannot be read (a kernel thread, a
    gone process, no ``/proc``)."""
    try:
        lines = (_PROC / str(pid) / "status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        name, _, rest = line.partition(":")
        if name == "VmHWM":
            return int(rest.split()[0]) * 1024
    return 0


def delta(before: Mapping[str, Usage], after: Mapping[str, Usage]) -> dict[str, float]:
    """CPU seconds each tree used between two readings (trees in both)."""
    return {
        name: max(0.0, after[name].cpu_seconds - before[name].cpu_seconds)
        for name in after
        if name in before
    }
