"""Firn's own code for Spark's executors, so a cluster's workers need no Firn.

A compaction task runs the merge kernel in a Spark Python worker. On a cluster those
workers have pyspark (from Spark itself), and pyarrow and numpy installed by whoever
runs the cluster, but not Firn. So the driver zips the ``firn`` package (its source,
as installed here) and adds it to the session with ``SparkContext.addPyFile``: Spark
copies it to every executor and puts it on the Python workers' path.

The zip is built once per process and named by a hash of its content, so a process
whose code changed ships a new name (Spark refuses to replace a file of the same name),
and processes with the same code reuse the same file. Python imports a zip with
``zipimport``, which loads pure Python only: the modules that run on executors must
therefore import nothing compiled that the workers lack (no pydantic, psycopg or
confluent_kafka). ``tests/unit/test_executor_imports.py`` holds them to that.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import logging
import os
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The ``firn`` package directory this process runs."""

EXECUTOR_MODULES = ("firn.engine.execution",)
"""What a Spark task imports first (``run_spark`` ships functions of this module);
everything else executors run is imported from here."""

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_shipped: set[tuple[str, str]] = set()
_lock = threading.Lock()


def _package_files() -> list[tuple[str, Path]]:
    """The package's files as (name in the zip, path), in a stable order: sources and
    package data, no byte code."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        found.append(("firn/" + path.relative_to(PACKAGE_DIR).as_posix(), path))
    return found


@functools.cache
def firn_zip() -> Path:
    """The zip of this process's ``firn`` package (built on first call)."""
    files = [(name, path.read_bytes()) for name, path in _package_files()]
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    folder = Path(tempfile.gettempdir()) / f"firn-pyfiles-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    target = folder / f"firn-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        # Written aside and renamed: another process may be building the same file.
        fd, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
                for name, data in files:
                    info = zipfile.ZipInfo(name, _ZIP_TIME)
                    info.external_attr = 0o644 << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(info, data)
            os.replace(partial, target)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        log.info("built %s (%d files)", target, len(files))
    return target


def ship_firn(session: SparkSession) -> Path:
    """Add the zip to ``session`` once (per Spark application); returns its path."""
    path = firn_zip()
    context = session.sparkContext
    key = (context.applicationId, str(path))
    with _lock:
        if key not in _shipped:
            context.addPyFile(str(path))
            _keep_driver_path(path)
            _shipped.add(key)
            log.info("shipped %s to Spark application %s", path.name, context.applicationId)
    return path


def _keep_driver_path(path: Path) -> None:
    """Take the zip's copy back off the driver's ``sys.path``.

    ``addPyFile`` also puts it first on the driver's path (for local-mode tests),
    so every Firn module the driver had not yet imported would then come from the
    zip, where package data (the event schemas) is no file; child processes would
    inherit that path too. The driver runs the installed Firn, always."""
    sys.path[:] = [entry for entry in sys.path if Path(entry).name != path.name]
    importlib.invalidate_caches()
