"""``firn up`` and ``firn down``: the local stack and the four services, as one unit."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, TypeGuard

from firn.errors import StackError
from firn.settings import FirnSettings

from .kafka import KAFKA_VERSION
from .stack import LocalStack, read_state
from .supervisor import SERVICES, ServiceProcesses

log = logging.getLogger(__name__)


def up(settings: FirnSettings, *, services: bool = True, as_json: bool = False) -> int:
    """Start everything, report it, and keep it running until SIGINT or SIGTERM."""
    existing = read_state(settings.home)
    if existing is not None and _alive(existing.get("supervisor_pid")):
        raise StackError(
            f"a stack is already running from {settings.home} "
            f"(pid {existing['supervisor_pid']}); stop it with `firn down`"
        )
    stopping = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)

    began = time.monotonic()
    url = settings.database_url.get_secret_value() if settings.database_url else None
    stack = LocalStack(
        home=settings.home,
        kafka_port=settings.kafka_port,
        postgres_port=settings.postgres_port,
        database_url=url,
        kafka_bootstrap=settings.kafka_bootstrap,
    )
    procs: ServiceProcesses | None = None
    try:
        stack.start()
        env = {**os.environ, **stack.environment()}
        connected_after = 0.0
        if services:
            procs = ServiceProcesses(env, settings.home / "logs")
            procs.start()
            stack.write_state(supervisor=os.getpid(), services=procs.pids)
            connected_after = procs.wait_connected(stack.apply_to(settings))
            stack.write_state(supervisor=os.getpid(), services=procs.pids)
        report = {
            "status": "up",
            "home": str(settings.home),
            "database_url": stack.database_url,
            "kafka_bootstrap": stack.kafka_bootstrap,
            "kafka_version": KAFKA_VERSION,
            "services": procs.pids if procs else {},
            "seconds": {
                **{k: round(v, 2) for k, v in stack.timings.items()},
                "services_connected": round(connected_after, 2),
                "total": round(time.monotonic() - began, 2),
            },
        }
        _print(report, as_json, _describe_up)
        while not stopping.wait(1.0):
            if procs is not None and procs.restart_exited():
                stack.write_state(supervisor=os.getpid(), services=procs.pids)
    finally:
        if procs is not None:
            procs.stop()
        stack.stop()
    _print({"status": "down"}, as_json, lambda _: "firn: stack stopped")
    return 0


def down(settings: FirnSettings, *, as_json: bool = False, timeout: float = 90.0) -> int:
    """Stop the stack that ``firn up`` runs from ``settings.home``; kill leftovers."""
    state = read_state(settings.home)
    if state is None:
        _print({"status": "not running"}, as_json, lambda _: "firn: no stack is running")
        return 0
    supervisor = state.get("supervisor_pid")
    if _alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.2)
    leftovers = [pid for pid in state.get("pids", {}).values() if _alive(pid)]
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    (settings.home / "stack.json").unlink(missing_ok=True)
    _print(
        {"status": "down", "killed_leftovers": leftovers},
        as_json,
        lambda r: (
            "firn: stack stopped"
            + (f" (killed {r['killed_leftovers']})" if r["killed_leftovers"] else "")
        ),
    )
    return 0


def _alive(pid: Any) -> TypeGuard[int]:
    """Whether ``pid`` (as read from the state file) is a running, non-zombie process."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it is not running.
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return True
    return status != "Z"


def _describe_up(report: dict[str, Any]) -> str:
    lines = [
        f"firn: stack is up (home {report['home']}, {report['seconds']['total']}s)",
        f"  postgres   {report['database_url']}",
        f"  kafka      {report['kafka_bootstrap']} (Apache Kafka {report['kafka_version']})",
    ]
    lines += [f"  {name:<10} pid {pid}, connected" for name, pid in report["services"].items()]
    lines.append("Press Ctrl-C (or run `firn down`) to stop everything.")
    return "\n".join(lines)


def _print(report: dict[str, Any], as_json: bool, describe: Any) -> None:
    print(json.dumps(report) if as_json else describe(report), flush=True)


__all__ = ["SERVICES", "down", "up"]
