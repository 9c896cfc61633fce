"""The five service processes of ``firn up``: start, wait until connected, restart, stop.

Each service runs as its own process (``python -m firn service NAME``), exactly as it
would on its own host; "connected" means it has registered in the catalog's service
registry, which it does only after reaching Postgres and Kafka (and, for the
dispatcher, building its SparkSession).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

import psycopg

from firn.errors import StackError
from firn.model.backoff import Backoff
from firn.postgres import connect, registry
from firn.settings import FirnSettings

from .processes import spawn, stop, tail

log = logging.getLogger(__name__)

SERVICES = ("metrics", "planner", "dispatcher", "committer", "publisher")

RESTART_LIMIT = 5
"""Exits of one service within ``RESTART_WINDOW`` after which the supervisor gives up."""
RESTART_WINDOW = 600.0
"""Seconds over which exits are counted: a service that exits now and then (a broker
outage it could not ride out) is restarted for as long as the stack runs; one that
exits again and again is broken and stops the stack with its log."""
RESTART_BACKOFF = Backoff(first=1.0, cap=30.0)
"""Wait before a restart: the first, doubled for each exit still in the window, capped."""


class RestartBudget:
    """When to restart one service, and when to give up on it."""

    def __init__(self, limit: int = RESTART_LIMIT, window: float = RESTART_WINDOW) -> None:
        self.limit = limit
        self.window = window
        self._exits: deque[float] = deque()

    def exited(self, now: float) -> float | None:
        """Record an exit at ``now``; the time to restart at, or None to give up."""
        self._exits.append(now)
        while self._exits and self._exits[0] < now - self.window:
            self._exits.popleft()
        if len(self._exits) > self.limit:
            return None
        return now + RESTART_BACKOFF.after(len(self._exits))


class ServiceProcesses:
    def __init__(
        self,
        env: Mapping[str, str],
        logs: Path,
        names: tuple[str, ...] = SERVICES,
        *,
        own: Mapping[str, Mapping[str, str]] | None = None,
    ):
        """``own``: variables of one service over ``env`` (its own database role)."""
        self._env = dict(env)
        self._own = {name: dict(variables) for name, variables in (own or {}).items()}
        self._logs = logs
        self._names = names
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._budgets = {name: RestartBudget() for name in names}
        self._restart_at: dict[str, float] = {}

    @property
    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._procs.items()}

    def log_path(self, name: str) -> Path:
        return self._logs / f"{name}.log"

    def start(self) -> None:
        for name in self._names:
            self._start_one(name)

    def _start_one(self, name: str) -> None:
        self._procs[name] = spawn(
            [sys.executable, "-m", "firn", "service", name],
            log_path=self.log_path(name),
            env={**self._env, **self._own.get(name, {})},
        )

    def wait_connected(self, settings: FirnSettings, timeout: float = 120.0) -> float:
        """Block until every service has registered; return the seconds it took."""
        began = time.monotonic()
        deadline = began + timeout
        conn = None
        try:
            while time.monotonic() < deadline:
                for name, proc in self._procs.items():
                    if proc.poll() is not None:
                        raise StackError(
                            f"service {name} exited with code {proc.returncode} while "
                            f"starting; last lines of {self.log_path(name)}:\n"
                            f"{tail(self.log_path(name))}"
                        )
                if conn is None:
                    conn = connect(settings, autocommit=True)
                try:
                    live = registry.live_instances(conn, within_seconds=timeout)
                except psycopg.errors.UndefinedTable:  # created by the first migration
                    live = {}
                if all(live.get(name, 0) > 0 for name in self._names):
                    return time.monotonic() - began
                time.sleep(0.5)
        finally:
            if conn is not None:
                conn.close()
        missing = ", ".join(self._names)
        raise StackError(
            f"services did not all connect within {timeout:.0f}s ({missing}); "
            f"see the logs in {self._logs}"
        )

    def restart_exited(self, now: float | None = None) -> list[str]:
        """Restart services that have exited, each after its backoff; give up (raise)
        when one exits more than ``RESTART_LIMIT`` times within ``RESTART_WINDOW``."""
        now = time.monotonic() if now is None else now
        restarted = []
        for name, proc in list(self._procs.items()):
            if proc.poll() is None:
                continue
            if name not in self._restart_at:
                at = self._budgets[name].exited(now)
                if at is None:
                    raise StackError(
                        f"service {name} exited more than {RESTART_LIMIT} times within "
                        f"{RESTART_WINDOW:.0f}s (last code {proc.returncode}); last lines "
                        f"of {self.log_path(name)}:\n{tail(self.log_path(name))}"
                    )
                log.warning(
                    "service %s exited with code %s; restarting it in %.0fs",
                    name,
                    proc.returncode,
                    at - now,
                )
                self._restart_at[name] = at
            if now >= self._restart_at[name]:
                del self._restart_at[name]
                self._start_one(name)
                restarted.append(name)
        return restarted

    def stop(self) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
        for name, proc in self._procs.items():
            stop(proc, name, timeout=30.0)
        self._procs.clear()
