"""The four service processes of ``firn up``: start, wait until connected, restart, stop.

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
from collections.abc import Mapping
from pathlib import Path

import psycopg

from firn.errors import StackError
from firn.postgres import connect, registry
from firn.settings import FirnSettings

from .processes import spawn, stop, tail

log = logging.getLogger(__name__)

SERVICES = ("metrics", "planner", "dispatcher", "committer")

_RESTART_LIMIT = 5
"""Restarts of one service before the supervisor gives up on the stack."""


class ServiceProcesses:
    def __init__(self, env: Mapping[str, str], logs: Path, names: tuple[str, ...] = SERVICES):
        self._env = dict(env)
        self._logs = logs
        self._names = names
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._restarts: dict[str, int] = dict.fromkeys(names, 0)

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
            env=self._env,
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

    def restart_exited(self) -> list[str]:
        """Restart any service that has exited; give up after repeated failures."""
        restarted = []
        for name, proc in list(self._procs.items()):
            if proc.poll() is None:
                continue
            self._restarts[name] += 1
            if self._restarts[name] > _RESTART_LIMIT:
                raise StackError(
                    f"service {name} keeps exiting (code {proc.returncode}); "
                    f"last lines of {self.log_path(name)}:\n"
                    f"{tail(self.log_path(name))}"
                )
            log.warning("service %s exited with code %s; restarting it", name, proc.returncode)
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
