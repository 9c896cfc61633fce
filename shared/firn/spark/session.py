"""Making ``format("firn")`` known to a SparkSession.

Four things, once per session:

- Firn's code is shipped to the executors (``firn.engine.shipping``), before the
  data source is registered: Spark hands executors the Python files that were
  added when a data source was registered;
- ``spark.sql.python.filterPushdown.enabled`` is switched on (Spark refuses a
  Python reader that takes pushed filters while it is off);
- the data source is registered. Spark plans a Python data source's reads (and
  commits its writes) in a Python worker on the driver's machine, started with the
  session's Python (``spark.pyspark.python``, ``PYSPARK_PYTHON``, else ``python3``
  on the PATH): that Python needs Firn installed, because it reaches the catalog.
  For a local master every worker runs on this machine, so this interpreter is
  registered as that Python; on a cluster the session's setting stands;
- when the session has Firn's jar, this process answers the JVM's ``format("firn")``
  (``firn.spark.jvm_format``), and the Python source is registered behind it as
  ``firn-python``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from firn.engine.shipping import ship_firn
from firn.spark import jvm_format
from firn.spark.source import FirnBehindJvm, FirnDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("firn")`` (and writes) known to ``spark``."""
    # Here, not at the top: executors import this package, and spark_session reads
    # Firn's settings (pydantic), which they lack.
    from firn.engine.spark_session import is_local

    context = spark.sparkContext
    ship_firn(spark)
    spark.conf.set(PUSHDOWN_CONF, "true")
    # With the jar, format("firn") is the JVM's FirnSource, which reads what the merge
    # reader takes whole and hands the rest to the Python source under another name.
    behind_jvm = jvm_format.install(spark)
    before = context.pythonExec
    if is_local(context.master or ""):
        context.pythonExec = sys.executable
    try:
        spark.dataSource.register(FirnBehindJvm if behind_jvm else FirnDataSource)
    finally:
        context.pythonExec = before
