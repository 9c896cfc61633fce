"""A Spark standalone cluster on loopback, from the ``spark-class`` pyspark ships.

One master and one worker, each a JVM started with ``bin/spark-class`` of the
installed pyspark package (its ``jars/`` hold all of Spark: nothing is downloaded),
with logs, scratch and work directories under a project-owned folder. The worker's
executors start Python workers from a virtualenv of their own (``worker_venv``):
pyarrow and numpy, the versions this process has, and nothing else; pyspark
reaches them as Spark's own ``python/lib/pyspark.zip``. So a job that runs Firn code
on this cluster proves that Firn ships its code to executors that do not have it.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firn.errors import StackError

from .processes import free_port, run, spawn, stop, wait_until

log = logging.getLogger(__name__)

_START_TIMEOUT = 120.0
WORKER_PACKAGES = ("pyarrow", "numpy")
"""What the worker's Python has: the executor side of Firn needs these (and pyspark,
which Spark itself puts on the workers' path)."""


def spark_home() -> Path:
    """The installed pyspark package, which is a Spark distribution (bin/, jars/)."""
    try:
        import pyspark
    except ImportError as exc:
        raise StackError("pyspark is not installed: `pip install pyspark`") from exc
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists() or not (home / "jars").is_dir():
        raise StackError(f"{home} has no bin/spark-class or jars/: not a full pyspark install")
    return home


def worker_venv_dir(cache: Path) -> Path:
    """Where ``worker_venv`` keeps the virtualenv: named after the Python and package
    versions, so a change of either makes a new one."""
    versions = {name: importlib.metadata.version(name) for name in WORKER_PACKAGES}
    tag = "-".join(f"{n}{v}" for n, v in versions.items())
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    # Absolute, never resolved: a virtualenv's python is a symlink to its base.
    return cache.absolute() / f"spark-worker-{py}-{tag}"


def worker_venv(cache: Path) -> Path:
    """The Python of a virtualenv with only ``WORKER_PACKAGES`` (at this process's
    versions), created once under ``cache`` and reused; returns its interpreter."""
    venv = worker_venv_dir(cache)
    cache = venv.parent
    versions = {name: importlib.metadata.version(name) for name in WORKER_PACKAGES}
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f"{venv.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    log.info("creating the Spark worker's virtualenv %s", venv)
    try:
        # The base interpreter, not this virtualenv's: nothing installed here leaks in.
        base = getattr(sys, "_base_executable", sys.executable)
        run([base, "-m", "venv", str(partial)], what="python -m venv")
        pins = [f"{n}=={v}" for n, v in versions.items()]
        run(
            [
                str(partial / "bin" / "python"),
                *("-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
                *pins,
            ],
            what=f"pip install {' '.join(pins)} into the Spark worker's virtualenv",
        )
        (partial / ".complete").write_text(json.dumps(versions))
        shutil.rmtree(venv, ignore_errors=True)
        partial.rename(venv)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return python


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.load(response)
    except (OSError, ValueError, urllib.error.URLError):
        return None


@dataclass
class SparkCluster:
    """A standalone master and one worker on 127.0.0.1; ``master_url`` is what a
    session (or ``FIRN_SPARK_MASTER``) connects to."""

    home: Path
    python: Path | None = None
    """The executors' Python (on the worker's PATH as ``python3``, and its
    PYSPARK_PYTHON); None leaves the worker's environment as it is."""
    cores: int = 1
    memory: str = "1g"
    port: int = 0
    web_port: int = 0
    _master: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _worker: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (self._master, self._worker) if p is not None]

    def start(self) -> None:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise StackError("Spark needs Java 17 or newer: install a JDK or set JAVA_HOME")
        home = spark_home()
        self.port = self.port or free_port()
        self.web_port = self.web_port or free_port()
        for sub in ("conf", "logs", "local", "work"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        env = self._env(home)
        self._master = spawn(
            [
                str(home / "bin" / "spark-class"),
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(self.port)),
                *("--webui-port", str(self.web_port)),
            ],
            log_path=self.home / "logs" / "master.log",
            env=env,
            cwd=self.home,
        )
        try:
            wait_until(
                lambda: self.state() is not None,
                what="Spark master",
                proc=self._master,
                log_path=self.home / "logs" / "master.log",
                timeout=_START_TIMEOUT,
            )
            self._worker = spawn(
                [
                    str(home / "bin" / "spark-class"),
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    *("--host", "127.0.0.1", "--port", str(free_port())),
                    *("--webui-port", str(free_port())),
                    *("--cores", str(self.cores), "--memory", self.memory),
                    *("--work-dir", str(self.home / "work")),
                ],
                log_path=self.home / "logs" / "worker.log",
                env=self._worker_env(env),
                cwd=self.home,
            )
            wait_until(
                lambda: self.alive_workers() >= 1,
                what="Spark worker",
                proc=self._worker,
                log_path=self.home / "logs" / "worker.log",
                timeout=_START_TIMEOUT,
            )
        except BaseException:
            self.stop()
            raise
        log.info("Spark cluster up at %s (pids %s)", self.master_url, self.pids)

    def stop(self) -> None:
        """The worker (and its executors) first, then the master."""
        if self._worker is not None:
            stop(self._worker, "Spark worker", timeout=30.0)
            self._worker = None
        if self._master is not None:
            stop(self._master, "Spark master", timeout=30.0)
            self._master = None

    def state(self) -> dict[str, Any] | None:
        """The master's status page as JSON (workers, applications), or None."""
        found = _get_json(f"http://127.0.0.1:{self.web_port}/json/")
        return found if isinstance(found, dict) else None

    def alive_workers(self) -> int:
        state = self.state() or {}
        return sum(w.get("state") == "ALIVE" for w in state.get("workers", []))

    def _env(self, home: Path) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            # The caller's Spark and Python settings are not this cluster's.
            if not key.startswith(("SPARK_", "PYSPARK_")) and key != "PYTHONPATH"
        }
        env.update(
            SPARK_HOME=str(home),
            SPARK_CONF_DIR=str(self.home / "conf"),
            SPARK_LOG_DIR=str(self.home / "logs"),
            SPARK_LOCAL_DIRS=str(self.home / "local"),
            SPARK_WORKER_DIR=str(self.home / "work"),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",
            # Short-lived daemons on a small machine: start fast, stay small.
            SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            # The REST submission server takes the fixed port 6066: not needed here.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )
        return env

    def _worker_env(self, env: dict[str, str]) -> dict[str, str]:
        if self.python is None:
            return env
        python = self.python.absolute()  # the worker runs elsewhere; not resolved (a symlink)
        bindir = str(python.parent)
        return {
            **env,
            # Spark starts executors' Python as the driver names it ("python3" unless
            # the driver says otherwise), looked up on the executor's PATH.
            "PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}",
            "PYSPARK_PYTHON": str(python),
            "VIRTUAL_ENV": str(python.parent.parent),
        }
