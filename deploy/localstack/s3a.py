"""Hadoop's S3 connector for a Spark session, fetched from Maven Central with Maven:
what a Spark job needs to open ``s3a://`` paths, which Firn's Spark readers and loader
use for a table on S3 (``firn.spark.hadoop``).

The connector must be the same Hadoop version as pyspark's own Hadoop client jars, so
the version is read from those and the AWS SDK pinned for it (Hadoop's build pins one
SDK per release). Jars pyspark already has (Netty, SLF4J, Commons) are left out: a
second copy of a class on the class path is a conflict waiting to happen.
"""

from __future__ import annotations

import logging
import re
import shutil
from importlib import resources
from pathlib import Path

from firn.errors import StackError

from . import maven

log = logging.getLogger(__name__)

SDK_FOR_HADOOP = {"3.5.0": ("2.35.4", "1.3.1"), "3.4.2": ("2.29.52", "1.2.1")}
"""pyspark's Hadoop version -> (the AWS SDK v2 version, the S3 analytics accelerator's)
that Hadoop's own build of that version pins (``hadoop-project``'s pom)."""

IN_PYSPARK = ("netty-", "slf4j-", "commons-logging-", "commons-codec-")
"""Jar name prefixes of the connector's closure that pyspark ships already."""


def pyspark_hadoop_version(jars: Path | None = None) -> str:
    """The Hadoop version of pyspark's client jars (``hadoop-client-api-<v>.jar``): this
    Python's pyspark's, or those in ``jars`` (another pyspark's ``jars`` folder)."""
    if jars is None:
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        found = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if found:
            return found.group(1)
    raise StackError(f"no hadoop-client-api jar among pyspark's jars in {jars}")


def s3a_jars(cache: Path, hadoop: str | None = None) -> list[Path]:
    """The jars to add to ``spark.jars`` for ``s3a://``, fetched on first use into
    ``cache`` (marked complete once the connector's file system class is among them):
    for this Python's pyspark, or for the Hadoop version ``hadoop``."""
    hadoop = hadoop or pyspark_hadoop_version()
    if hadoop not in SDK_FOR_HADOOP:
        raise StackError(
            f"no AWS SDK pinned for pyspark's Hadoop {hadoop} (known: "
            f"{sorted(SDK_FOR_HADOOP)}): add the versions hadoop-project {hadoop} pins"
        )
    sdk, analytics = SDK_FOR_HADOOP[hadoop]
    folder = (cache / f"s3a-hadoop-{hadoop}").resolve()
    libs = folder / "jars"
    done = folder / ".complete"
    if not done.exists():
        log.info("fetching hadoop-aws %s and AWS SDK %s jars from Maven Central", hadoop, sdk)
        if libs.exists():
            shutil.rmtree(libs)
        libs.mkdir(parents=True)
        template = resources.files(__package__).joinpath("s3a-connector.pom.xml").read_text()
        pom = folder / "pom.xml"
        pom.write_text(
            template.replace("HADOOP_VERSION", hadoop)
            .replace("AWS_SDK_VERSION", sdk)
            .replace("ANALYTICS_VERSION", analytics)
        )
        maven.copy_dependencies(
            pom, libs, cache.resolve(), what="resolving Hadoop's S3 connector with Maven"
        )
        if not (libs / f"hadoop-aws-{hadoop}.jar").exists():
            raise StackError(f"hadoop-aws {hadoop} is not among the jars fetched into {libs}")
        done.touch()
    return sorted(j for j in libs.glob("*.jar") if not j.name.startswith(IN_PYSPARK))
