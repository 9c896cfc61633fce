"""The one place Firn builds a SparkSession: local mode by default, any master by settings.

A caller that already has a session passes it instead (``firn.compact(...,
spark=session)``); either way ``firn.engine.execution.run_spark`` ships Firn's code
to the executors (``firn.engine.shipping``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from firn.engine.jars import spark_jar
from firn.settings import FirnSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Quiet, small-machine defaults; FIRN_SPARK_CONF overrides any of them.
_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
}
_LOCAL_DEFAULTS = {
    # Local executors live in this process (or on this machine, local-cluster): the
    # loopback address always works, whatever the host name resolves to. A remote
    # executor could never reach it, so a cluster master gets Spark's own choice
    # (or the spark.driver.host of FIRN_SPARK_CONF).
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}
PYTHON_CONF = "spark.pyspark.python"
"""The Python the executors start, as FIRN_SPARK_CONF may set it."""


def is_local(master: str) -> bool:
    """Whether ``master`` runs executors on this machine: ``local``, ``local[4]``,
    ``local[*, 2]``, ``local-cluster[...]``."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def session_conf(settings: FirnSettings) -> dict[str, str]:
    """The Spark settings a session for ``settings`` is built with. The jar of the JVM
    merge reader and loader (``firn.spark.jvm``, ``firn.spark.load``), when built, is
    added to ``spark.jars`` (Spark ships it to the executors)."""
    local = _LOCAL_DEFAULTS if is_local(settings.spark_master) else {}
    conf = {**_DEFAULTS, **local, **settings.spark_conf}
    jar = spark_jar()
    if jar is not None:
        given = conf.get("spark.jars", "")
        conf["spark.jars"] = f"{given},{jar}" if given else str(jar)
    return conf


def worker_python(settings: FirnSettings) -> str | None:
    """The Python executable executors start, or None for Spark's default
    (``python3`` on the executor's PATH).

    ``spark.pyspark.python`` in the settings wins; else a ``PYSPARK_PYTHON`` of the
    environment; else, for a local master only, this interpreter (which has Firn's
    dependencies); a cluster's workers run their own Python."""
    configured = settings.spark_conf.get(PYTHON_CONF) or os.environ.get("PYSPARK_PYTHON")
    if configured:
        return configured
    return sys.executable if is_local(settings.spark_master) else None


@contextlib.contextmanager
def _pyspark_python(python: str | None) -> Iterator[None]:
    """PySpark takes the executors' Python from the driver's PYSPARK_PYTHON when the
    SparkContext starts (``spark.pyspark.python`` is honoured by spark-submit, not by
    a session built in-process); it is set only for that moment, so a later session
    for another master does not inherit it."""
    before = os.environ.get("PYSPARK_PYTHON")
    if python is None:
        yield
        return
    os.environ["PYSPARK_PYTHON"] = python
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def spark_session(settings: FirnSettings, app_name: str = "firn") -> SparkSession:
    """Build (or return the running) SparkSession for ``settings.spark_master``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(settings.spark_master).appName(app_name)
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    with _pyspark_python(worker_python(settings)):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
