"""The jar Firn's Spark sessions put on ``spark.jars``: the JVM merge reader
(``firn.spark.jvm``) and loader (``firn.spark.load``), where ``jvm/build.sh`` (run by
``make setup``) builds them.
Imports nothing, so executors and the driver alike may ask."""

from __future__ import annotations

from pathlib import Path

SPARK_JAR = Path(__file__).parent.parent / "spark" / "jars" / "firn-spark.jar"


def spark_jar() -> Path | None:
    """The JVM reader and loader's jar, or None when it is not built (no JDK at setup)."""
    return SPARK_JAR if SPARK_JAR.is_file() else None
