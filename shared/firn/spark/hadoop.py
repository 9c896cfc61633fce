"""Where Spark's own readers and writers find a table's files: the table's location as
a Hadoop file system names it, and whether a session has that file system.

Spark's Parquet reader, Firn's JVM merge reader and its JVM loader open files through
Hadoop's ``FileSystem``, which names object stores its own way: an S3 bucket is
``s3a://`` (Hadoop's S3 connector), where Firn's locations are ``pyarrow.fs`` URIs
(``s3://lake/firn/orders-7?region=...&endpoint_override=...``, the query carrying
pyarrow's options). So a file's Hadoop URI drops the query and maps the scheme; the
connector's own settings (``spark.hadoop.fs.s3a.endpoint``, credentials, path-style
access) are the session's, as for any other S3 data a Spark job reads.

A session without the connector (no ``hadoop-aws`` on its class path) cannot open
those URIs: ``reaches`` says so, and every read and load of such a table then goes
through the ``firn`` Python source, which reads with pyarrow as Firn's own code does.
Slower, never wrong.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from firn.io.storage import file_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

HADOOP_SCHEMES = {
    "file": "file",
    "s3": "s3a",
    "gs": "gs",
    "gcs": "gs",
    "hdfs": "hdfs",
    "viewfs": "viewfs",
    "abfs": "abfs",
    "abfss": "abfss",
}
"""A ``pyarrow.fs`` scheme and the Hadoop file system scheme that reads the same
objects: S3 through ``s3a`` (the connector in ``hadoop-aws``), Google Cloud Storage
through the GCS connector's ``gs``, the rest by the same name."""

_reached: dict[tuple[str, str], bool] = {}
"""By Spark application (its jars are fixed when its context starts) and scheme."""
_reached_lock = threading.Lock()


def hadoop_scheme(location: str) -> str | None:
    """The Hadoop scheme that reads ``location`` (a table's root: a local path or a
    ``pyarrow.fs`` URI), or None for a store Firn knows no Hadoop name for."""
    if "://" not in location:
        return "file"
    return HADOOP_SCHEMES.get(location.partition("://")[0].lower())


def hadoop_uri(location: str, relative: str) -> str:
    """The URI of the file ``relative`` under the table root ``location`` as Hadoop's
    file systems take it: a local path as ``file://``, an object store's URI with its
    scheme mapped (``hadoop_scheme``) and without the query of ``pyarrow.fs`` options."""
    scheme, _, rest = file_uri(location, relative).partition("://")
    return f"{HADOOP_SCHEMES.get(scheme.lower(), scheme)}://{rest}"


def reaches(spark: SparkSession, location: str) -> bool:
    """Whether ``spark`` has a Hadoop file system for ``location``'s files (local files
    always; ``s3a`` only with ``hadoop-aws`` and the AWS SDK on its class path). Asked
    once per session and scheme; a session that cannot be asked (no JVM this process
    drives) reaches local files alone."""
    scheme = hadoop_scheme(location)
    if scheme is None:
        return False
    if scheme == "file":
        return True
    if getattr(spark, "_jvm", None) is None or getattr(spark, "_jsc", None) is None:
        return False
    key = (str(spark.sparkContext.applicationId), scheme)
    with _reached_lock:
        known = _reached.get(key)
    if known is not None:
        return known
    found = _has_file_system(spark, scheme)
    with _reached_lock:
        _reached[key] = found
    return found


def _has_file_system(spark: SparkSession, scheme: str) -> bool:
    try:
        spark._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(  # type: ignore[union-attr]
            scheme,
            spark._jsc.hadoopConfiguration(),
        )
    except Exception:
        log.info(
            "this Spark session has no Hadoop file system for %s://: tables there are "
            "read and loaded by the firn Python source (add hadoop-aws and the AWS SDK "
            "to spark.jars for s3a)",
            scheme,
        )
        return False
    return True
