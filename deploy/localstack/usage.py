"""CPU time and memory of the stack's processes, read from ``/proc`` (Linux only;
elsewhere nothing is measured and the demo says so).

A process is measured with everything it started, found through
``/proc/PID/task/TID/children``: the dispatcher with its Spark JVM and that JVM's
Python workers, Postgres with its backends. CPU time is user + system time of every
live process of the tree plus what their exited, reaped children used
(``cutime``/``cstime``), so a difference of two readings is the CPU the tree used in
between. ``rss`` is the resident set size now; ``peak_rss`` the sum of each live
process's own high-water mark (``VmHWM``), an upper bound of the tree's true peak
since its processes need not peak at the same moment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Usage:
    """One reading of a process tree."""

    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int
    processes: int


def read_usage(pid: int, *, tree: bool = True) -> Usage | None:
    """``pid`` and (with ``tree``) its descendants now; None if it is gone or there is
    no ``/proc``. Without ``tree`` only the process's own threads count."""
    if read_stat(pid) is None:
        return None
    pids = descendants(pid) if tree else [pid]
    cpu, rss, peak, count = 0.0, 0, 0, 0
    for p in pids:
        stat = read_stat(p)
        if stat is None:  # exited while we looked
            continue
        own, reaped = stat
        cpu += own + (reaped if tree else 0.0)
        now, high = read_memory(p)
        rss += now
        peak += high
        count += 1
    return Usage(cpu_seconds=cpu, rss_bytes=rss, peak_rss_bytes=peak, processes=count)


def read_all(pids: Mapping[str, int], *, own: str | None = None) -> dict[str, Usage]:
    """A reading per named process tree; ``own`` names this process, measured
    without its children (which are the services)."""
    readings = {name: read_usage(pid, tree=name != own) for name, pid in pids.items()}
    return {name: usage for name, usage in readings.items() if usage is not None}


def read_stat(pid: int) -> tuple[float, float] | None:
    """(own CPU seconds, CPU seconds of reaped children) of ``pid``."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields follow the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) / _TICKS, (cutime + cstime) / _TICKS


def read_memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in bytes; zeros for a kernel thread or a gone process."""
    values = {"VmRSS": 0, "VmHWM": 0}
    try:
        lines = (_PROC / str(pid) / "status").read_text().splitlines()
    except OSError:
        return 0, 0
    for line in lines:
        name, _, rest = line.partition(":")
        if name in values:
            values[name] = int(rest.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, parents first."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(child for child in children(current) if child not in found)
    return found


def children(pid: int) -> list[int]:
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except OSError:
        return []
    kids: list[int] = []
    for task in tasks:
        try:
            kids.extend(int(v) for v in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return kids


def delta(before: Mapping[str, Usage], after: Mapping[str, Usage]) -> dict[str, float]:
    """CPU seconds each tree used between two readings (trees in both)."""
    return {
        name: max(0.0, after[name].cpu_seconds - before[name].cpu_seconds)
        for name in after
        if name in before
    }
