"""Spark with Iceberg's own runtime jar reads a published Firn table: the same rows as
Firn, time travel included, and how fast against Spark's plain Parquet reader.

A keyed table ``bench.orders`` (Iceberg ``bench.orders``) in ``--partitions``
partitions (``deletion-vectors.min-file-bytes`` 1: major compactions keep base files
with deletion vectors, published as position delete files) is loaded with ``--rows``
rows, then ``--rounds`` times: upserts and deletes (``--changes`` rows a round, 10 %
deletes, 10 % new keys) are committed, compacted (``firn.compact(kind="major",
engine="local")``) and published (``Publisher(conn).publish``). Spark then reads
through ``org.apache.iceberg.spark.SparkCatalog`` with
``catalog-impl=org.apache.iceberg.jdbc.JdbcCatalog`` on the same Postgres (Firn's
schema as ``currentSchema``, ``jdbc.schema-version=V1``), no Firn code involved:

1. ``SELECT * FROM firn.bench.orders`` must equal ``Table.read()`` row for row (by key);
2. ``VERSION AS OF <id>`` of every older publication must equal
   ``Table.scan(snapshot=<its firn_snapshot>, merged_only=True)``;
3. the full read into Spark's ``noop`` sink is timed (best of ``--runs``, after a
   warm-up) against ``spark.read.parquet`` of the same live base files (deletes not
   applied: the floor).

Iceberg's Spark runtimes on Maven Central are built for Spark 4.0 and 4.1
(``iceberg-spark-runtime-4.0_2.13`` 1.10.x/1.11.0, ``-4.1_2.13`` 1.11.0/1.12.0); none
loads in the project's pyspark 4.3.0 (``IncompatibleClassChangeError: class
org.apache.iceberg.spark.source.SparkView can not implement
org.apache.spark.sql.connector.catalog.View``: Spark 4.3 made ``View`` a class). So the
Spark side (``bench/iceberg_spark_read.py``: pyspark and the jars only) runs in a venv
of its own, ``.firn/spark-4.1`` with pyspark 4.1.4, created on first use; the jars
are downloaded from Maven Central (SHA-1 checked) into ``~/.cache/firn-jars``.

Measured 2026-11-27 (2-core development machine, throwaway local Postgres, Spark
local[2], driver 2g; pyspark 4.1.4 + iceberg-spark-runtime-4.1_2.13 1.12.0 +
postgresql 42.7.14, OpenJDK 17):

    .venv/bin/python bench/iceberg_spark.py          # 41 s wall, of it ~20 s Spark
      firn.bench.orders: 4 publications, 128 data files (96 with deletion vectors),
        192 position delete files
      PASS SELECT * == Table.read() (997,644 rows); PASS VERSION AS OF each of the 3
        older snapshots == Table.scan(snapshot=1/13/25, merged_only=True)
        (1,000,000 / 999,046 / 998,392 rows)
      full read into noop: Spark+Iceberg 0.971 s vs spark.read.parquet of the 128 live
        base files 0.445 s (1,260,916 rows, deletes not applied): 2.18x
        (a second run: 0.980 s / 0.433 s = 2.26x)
    .venv/bin/python bench/iceberg_spark.py --quick  # 32 s
      all PASS (99,888 rows); 0.882 s vs 0.249 s = 3.54x

    .venv/bin/python bench/iceberg_spark.py                # 1M rows, 3 rounds of 100k changes
    .venv/bin/python bench/iceberg_spark.py --quick        # 100k rows, ~1 min
    .venv/bin/python bench/iceberg_spark.py --spark-python .venv/bin/python   # another pyspark
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from harness import REPO, bench_catalog  # bench/ is on sys.path when run as a script
from psycopg.conninfo import conninfo_to_dict
from publish import SCHEMA, change_set, rows  # the same table as bench/publish.py

import firn
from firn.iceberg.names import iceberg_name
from firn.iceberg.publisher import DEFAULT_CATALOG, Publication, Publisher
from firn.postgres.connection import connect
from firn.settings import FirnSettings

NAME = "bench.orders"
KEY = ["part", "id"]
PROPERTIES = {"base.buckets": 4, "change.buckets": 4, "deletion-vectors.min-file-bytes": 1}

MAVEN = "https://repo1.maven.org/maven2"
ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
POSTGRES_DRIVER = "org.postgresql:postgresql:42.7.14"
JAR_CACHE = Path.home() / ".cache" / "firn-jars"
SPARK_VENV = REPO / ".firn" / "spark-4.1"
SPARK_PIN = "pyspark==4.1.4"
READER = Path(__file__).with_name("iceberg_spark_read.py")


# -- the Spark side's prerequisites ----------------------------------------------------


def jar(coordinate: str) -> Path:
    """``group:artifact:version`` from Maven Central, cached, its SHA-1 checked."""
    group, artifact, version = coordinate.split(":")
    name = f"{artifact}-{version}.jar"
    path = JAR_CACHE / name
    if path.exists():
        return path
    url = f"{MAVEN}/{group.replace('.', '/')}/{artifact}/{version}/{name}"
    JAR_CACHE.mkdir(parents=True, exist_ok=True)
    print(f"downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url) as response:
        body = response.read()
    with urllib.request.urlopen(url + ".sha1") as response:
        expected = response.read().decode().split()[0]
    if hashlib.sha1(body).hexdigest() != expected:
        raise RuntimeError(f"{url}: SHA-1 mismatch")
    partial = path.with_suffix(".part")
    partial.write_bytes(body)
    partial.rename(path)
    return path


def spark_python(given: str | None) -> str:
    """The Python that runs the Spark side: ``given``, else ``.firn/spark-4.1``
    (created with ``pyspark==4.1.4`` when missing)."""
    if given:
        return given
    python = SPARK_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {SPARK_VENV} with {SPARK_PIN}", file=sys.stderr)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(SPARK_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", SPARK_PIN], check=True)
    return str(python)


def spark_properties(settings: FirnSettings) -> dict[str, str]:
    """The Iceberg catalog properties (``spark.sql.catalog.firn.<key>``) for the JDBC
    catalog in Firn's Postgres schema."""
    parts = {k: str(v) for k, v in conninfo_to_dict(settings.database_dsn()).items() if v}
    host = parts.get("host", "localhost")
    if host.startswith("/") or "," in host:
        raise SystemExit(f"a JDBC URL needs one TCP host, not {host!r}")
    if ":" in host:
        host = f"[{host}]"
    url = (
        f"jdbc:postgresql://{host}:{parts.get('port', '5432')}/{parts.get('dbname', '')}"
        f"?currentSchema={settings.database_schema}"
    )
    for tls in ("sslmode", "sslrootcert"):  # the local stack's Postgres verifies in full
        if parts.get(tls):
            url += f"&{tls}={quote(parts[tls], safe='/')}"
    warehouse = str(settings.warehouse)
    properties = {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": url,
        "jdbc.user": parts.get("user", ""),
        "jdbc.schema-version": "V1",
        "warehouse": warehouse if "://" in warehouse else f"file://{warehouse}",
    }
    if parts.get("password"):
        properties["jdbc.password"] = parts["password"]
    return properties


def run_spark_side(python: str, script: Path, job: dict[str, Any]) -> dict[str, Any]:
    """Run ``script`` (pyspark only) in ``python`` with ``job`` as JSON on stdin (it may
    hold a password: not on the command line); the JSON object it prints last. A
    failure prints the tail of its stderr and exits."""
    done = subprocess.run(
        [python, str(script)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": python},
        check=False,
    )
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"FAIL: {script.name} exited with {done.returncode}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


# -- the Firn side ---------------------------------------------------------------------


def canonical(table: pa.Table) -> pa.Table:
    out = pa.table({f.name: table.column(f.name).cast(f.type) for f in SCHEMA})
    return out.sort_by([(k, "ascending") for k in KEY])


def difference(got: pa.Table, expected: pa.Table) -> str:
    """Empty when the rows are the same, else what differs (by key)."""
    got, expected = canonical(got), canonical(expected)
    if got.equals(expected):
        return ""

    def by_key(t: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(r[k] for k in KEY): r for r in t.to_pylist()}

    a, b = by_key(got), by_key(expected)
    missing = b.keys() - a.keys()
    extra = a.keys() - b.keys()
    changed = [k for k in a.keys() & b.keys() if a[k] != b[k]]
    return (
        f"Spark {got.num_rows} rows ({len(a)} keys), Firn {expected.num_rows}: "
        f"{len(missing)} missing, {len(extra)} extra, {len(changed)} differ "
        f"(e.g. {sorted(missing)[:3]} {sorted(extra)[:3]} {sorted(changed)[:3]})"
    )


def build(catalog: firn.Catalog, args: argparse.Namespace) -> tuple[firn.Table, list[Publication]]:
    rng = np.random.default_rng(args.seed)
    table = catalog.create_table(NAME, SCHEMA, KEY, ["part"], PROPERTIES)
    table.load(rows(rng, np.arange(args.rows), args.partitions))
    conn = connect(catalog.settings, autocommit=True)
    publisher = Publisher(conn)
    publications = [publisher.publish(NAME)]
    keys = int(args.rows * 1.1)
    for _ in range(args.rounds):
        for _ in range(args.commits):
            table.commit(change_set(rng, keys, args.changes // args.commits, args.partitions))
        firn.compact(table, kind="major", engine="local")
        publications.append(publisher.publish(NAME))
    conn.close()
    for p in publications:
        assert p.outcome == "published", p
    return table, publications


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows loaded first")
    parser.add_argument("--rounds", type=int, default=3, help="commit+compact+publish rounds")
    parser.add_argument("--changes", type=int, default=100_000, help="rows changed a round")
    parser.add_argument("--commits", type=int, default=4, help="commits a round")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3, help="timings per read (best kept)")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--spark-python", help="Python with a pyspark Iceberg supports")
    parser.add_argument("--iceberg-runtime", default=ICEBERG_RUNTIME, help="Maven coordinate")
    parser.add_argument("--quick", action="store_true", help="100k rows, 10k changes a round")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.changes = 100_000, 10_000
    python = spark_python(args.spark_python)
    jars = [str(jar(args.iceberg_runtime)), str(jar(POSTGRES_DRIVER))]
    failures = 0
    with bench_catalog() as catalog:
        table, publications = build(catalog, args)
        files = table.files().to_pylist()
        base = [table.storage.full_path(f["path"]) for f in files if f["store"] == "base"]
        vectors = sum(1 for f in files if f["store"] == "base" and f["deletion_vector"])
        older = publications[:-1]
        ident = iceberg_name(NAME)
        out = Path(tempfile.mkdtemp(prefix="iceberg-spark-", dir=REPO / ".firn"))
        try:
            job = {
                "jars": jars,
                "catalog": DEFAULT_CATALOG,
                "properties": spark_properties(catalog.settings),
                "table": str(ident),
                "versions": [p.iceberg_snapshot for p in older],
                "base_files": [f if "://" in f else f"file://{f}" for f in base],
                "out": str(out),
                "runs": args.runs,
                "cores": args.cores,
                "driver_memory": "2g",
            }
            spark = run_spark_side(python, READER, job)
            expected = table.read()
            print(
                f"Spark {spark['spark_version']} + Iceberg {spark['iceberg_version']} "
                f"(JdbcCatalog, schema V1) on Firn schema {catalog.settings.database_schema}: "
                f"{DEFAULT_CATALOG}.{ident}, {len(publications)} publications, "
                f"{spark['data_files']} data files ({vectors} with deletion vectors), "
                f"{spark['delete_files']} position delete files"
            )
            why = difference(pq.read_table(out / "current"), expected)
            verdict = "FAIL" if why else "PASS"
            failures += bool(why)
            print(
                f"{verdict}: SELECT * FROM {DEFAULT_CATALOG}.{ident} == Table.read() "
                f"({expected.num_rows:,} rows) {why}"
            )
            for p in older:
                firn_rows = table.scan(snapshot=p.firn_snapshot, merged_only=True).to_arrow()
                why = difference(pq.read_table(out / f"version-{p.iceberg_snapshot}"), firn_rows)
                verdict = "FAIL" if why else "PASS"
                failures += bool(why)
                print(
                    f"{verdict}: VERSION AS OF {p.iceberg_snapshot} == Table.scan(snapshot="
                    f"{p.firn_snapshot}, merged_only=True) ({firn_rows.num_rows:,} rows) {why}"
                )
            if spark["delete_files"] == 0:
                failures += 1
                print("FAIL: the published table has no position delete files to apply")
            ratio = spark["iceberg_s"] / spark["parquet_s"]
            print(
                f"full read into noop, best of {args.runs} (local[{args.cores}]): Spark+Iceberg "
                f"{spark['iceberg_s']:.3f} s ({spark['iceberg_rows']:,} rows) vs "
                f"spark.read.parquet of the {len(base)} live base files "
                f"{spark['parquet_s']:.3f} s ({spark['parquet_rows']:,} rows, deletes not "
                f"applied): {ratio:.2f}x"
            )
        finally:
            shutil.rmtree(out, ignore_errors=True)
    print("PASS" if failures == 0 else f"FAIL: {failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
