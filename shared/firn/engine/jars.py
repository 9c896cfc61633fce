"""The jars Firn's Spark sessions put on ``spark.jars``: the JVM merge reader
(``firn.spark.jvm``), where ``jvm/build.sh`` (run by ``make setup``) builds it.
Imports nothing, so executors and the driver alike may ask."""

from __future__ import annotations

from pathlib import Path

MERGE_JAR = Path(__file__).parent.parent / "spark" / "jars" / "firn-merge.jar"


def merge_jar() -> Path | None:
    """The JVM merge reader's jar, or None when it is not built (no JDK at setup)."""
    return MERGE_JAR if MERGE_JAR.is_file() else None
