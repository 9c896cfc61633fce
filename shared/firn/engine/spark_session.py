"""The one place a SparkSession is built: local mode by default, any master by settings."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from firn.settings import FirnSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Quiet, small-machine defaults; FIRN_SPARK_CONF overrides any of them.
_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


def spark_session(settings: FirnSettings, app_name: str = "firn") -> SparkSession:
    """Build (or return the running) SparkSession for ``settings.spark_master``."""
    from pyspark.sql import SparkSession

    # Python workers must run the interpreter that has Firn installed. PySpark reads
    # this from the driver's environment only (the spark.pyspark.python setting is
    # honoured by spark-submit, not by a session built in-process).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(settings.spark_master).appName(app_name)
    for key, value in {**_DEFAULTS, **settings.spark_conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
