"""The JVM pieces' own data structures held to Java's: ``jvm/checks/``'s
``SortedKeysCheck`` asks ``SortedBytes`` (string, binary and decimal keys) and
``SplitReader.SortedKeys`` (integer keys) about random base keys in key order (the
walk), in any order (the binary search a key smaller than the one before takes, which
no Firn-written base file reaches) and after a restart, with keys that differ only
past the words' 16 bytes, by trailing zero bytes or in bytes above 0x7f;
``PrefixSortCheck`` sorts random prefixes (a few bytes differing, or all eight, the sign
bit set, many ties put in order by a second key) by the loader's in-task sort and by
Java's; ``ColumnFileWriterCheck`` writes random rows of every type the loader's column
writer takes through it and through Spark's own write support, and the files must be
equal. Compiled against the built jar, so they check the classes Spark runs."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from firn.spark.jvm import jar_path

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "jvm" / "checks" / "org" / "firn" / "spark"


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    jar = jar_path()
    assert jar is not None, "the JVM merge reader is not built: run make setup (needs javac)"
    javac = shutil.which("javac")
    assert javac is not None, "javac (a JDK 17) builds the merge reader and this check"
    spark_jars = Path(pyspark.__file__).parent / "jars"
    base = f"{jar}{os.pathsep}{spark_jars}{os.sep}*"
    classes = tmp_path_factory.mktemp("checks")
    built = subprocess.run(
        [
            javac,
            "-nowarn",
            "--release",
            "17",
            "-d",
            str(classes),
            "-cp",
            base,
            *map(str, sorted(CHECKS.glob("*.java"))),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return f"{classes}{os.pathsep}{base}"


@pytest.mark.parametrize("seed", [38, random.randrange(1 << 40)])
@pytest.mark.parametrize("check", ["SortedKeysCheck", "PrefixSortCheck"])
def test_the_jvm_structures_answer_as_javas_own(classpath: str, check: str, seed: int) -> None:
    java = shutil.which("java")
    assert java is not None
    done = subprocess.run(
        [java, "-cp", classpath, f"org.firn.spark.{check}", str(seed), "300"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{check}, seed {seed}: {done.stderr}"
    assert done.stdout.startswith("ok: 300 trials"), done.stdout


@pytest.mark.parametrize("seed", [38, random.randrange(1 << 40)])
def test_the_loaders_column_writer_writes_the_file_sparks_write_support_does(
    classpath: str, tmp_path: Path, seed: int
) -> None:
    """The same rows through Parquet's record writer with Spark's write support and
    through the column writer a load's tasks use: the same Parquet schema (types,
    logical types, field ids), footer metadata and values, nulls and all."""
    java = shutil.which("java")
    assert java is not None
    done = subprocess.run(
        [
            java,
            "-cp",
            classpath,
            "org.firn.spark.ColumnFileWriterCheck",
            str(seed),
            "5000",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"seed {seed}: {done.stderr}"
    records = pq.ParquetFile(tmp_path / "records.parquet")
    columns = pq.ParquetFile(tmp_path / "columns.parquet")
    assert columns.schema.to_arrow_schema().equals(
        records.schema.to_arrow_schema(), check_metadata=True
    )
    assert columns.schema.equals(records.schema)
    # The text form, past its first line (the object's address): physical and logical types.
    assert str(columns.schema).split("\n")[1:] == str(records.schema).split("\n")[1:]
    assert columns.metadata.metadata == records.metadata.metadata
    assert columns.metadata.num_row_groups > 1
    written = columns.read()
    assert written.num_rows == 5000
    assert written.equals(records.read())
    assert written.column("d30").null_count > 0
