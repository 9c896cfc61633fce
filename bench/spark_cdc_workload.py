"""The CDC workload of ``bench/spark_cdc.py``, as Spark SQL: the same rows on either
side (Firn's ``format("firn")`` and Iceberg's own connector), generated inside Spark
so that a load times the writer, not Python making rows. Standard library and
pyspark only: the Iceberg side runs in a venv without Firn.

- base: ids ``0 .. rows-1``; ``qty``, ``price``, ``name``, ``ts`` functions of the id;
- commit ``c``: ``changes`` distinct ids ``(53 i + 7919 c) mod (1.1 rows)`` (some
  beyond the base: inserts), a fifth of them deletes, the others upserts whose
  values depend on ``c``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from warm_memory import warm

COLUMNS = "id BIGINT, qty BIGINT, price DOUBLE, name STRING, ts TIMESTAMP"
"""The table's columns; with ``--key string`` (``binary``, ``decimal``) ``id`` is a STRING
(BINARY, DECIMAL(20,0))."""
KEY_DIGITS = 12
"""A string key is the id's digits padded to this width, ``000001234567``; a binary key
is that string's bytes; a decimal key the id as DECIMAL(20,0), which Spark holds as bytes
(past 18 digits), not as a long."""
KEY_TYPES = {"int": "BIGINT", "string": "STRING", "binary": "BINARY", "decimal": "DECIMAL(20,0)"}
"""``--key``: the key column's SQL type."""
VALUES = ["qty", "price", "name", "ts"]
PRUNED = ["qty", "name"]
"""The columns of the pruned reads (``read_pruned_*``): a number and a string, not the key,
which a merge reads all the same."""
WARM_UP_ROWS = 1_000_000
"""Rows each side's session writes (and reads) into a table of its own before anything
is timed: Spark starting its Python workers, or loading Iceberg's classes, and the JVM
compiling each side's writer, are paid once per session, not per load. With 10k rows
the JVM had compiled little: Firn's first 5M-row load of string keys took 7.9 s and
its next ones 2.6-3.0 s, and the script timed one side's first load against the
other's second."""
LOOKUP = "id = 1234567"
"""The point lookup (``read_key_*``): one key of the base, by Spark's own filter."""
UNPRUNED_LOOKUP = "id = 1234567 OR id = -1"
"""The same lookup as a filter Firn's merge reader does not prune with (an ``OR``; Spark
folds ``id + 0`` back to ``id``): what it costs when every row is read and Spark filters
them (Firn's side reports it as ``read_key_unpruned_*``)."""


def columns(key: str) -> str:
    return COLUMNS.replace("id BIGINT", f"id {KEY_TYPES[key]}")


def key_of(number: str, key: str) -> str:
    """The key column's expression for the id ``number`` (a SQL expression)."""
    if key == "int":
        return number
    if key == "decimal":
        return f"CAST({number} AS DECIMAL(20,0))"
    digits = f"lpad(CAST({number} AS STRING), {KEY_DIGITS}, '0')"
    return digits if key == "string" else f"CAST({digits} AS BINARY)"


def lookup(key: str, pruned: bool = True) -> str:
    """``LOOKUP`` (or ``UNPRUNED_LOOKUP``) for the key's type."""
    digits = "1234567".rjust(KEY_DIGITS, "0")
    literal = {
        "int": "1234567",
        "string": f"'{digits}'",
        "binary": f"X'{digits.encode().hex()}'",
        "decimal": "1234567BD",
    }
    absent = {"int": "-1", "string": "'none'", "binary": "X'00'", "decimal": "-1BD"}
    found = f"id = {literal[key]}"
    return found if pruned else f"{found} OR id = {absent[key]}"


PERMUTER = 2_654_435_761
"""A prime above any ``--rows``: ``pmod(id * PERMUTER, rows)`` takes every id below ``rows``
once, in an order that looks random."""


def base(spark: SparkSession, rows: int, key: str = "int", ordered: bool = True) -> DataFrame:
    """The base rows: ids 0 to ``rows`` - 1 in order (Spark knows a range's order, and a
    sort by an integer id over it is skipped), or, not ``ordered``, the same ids permuted:
    the order of rows read from somewhere else, which a writer that sorts has to sort."""
    ids = spark.range(0, rows)
    if not ordered:
        ids = ids.selectExpr(f"pmod(id * {PERMUTER}, {rows}) AS id")
    return ids.selectExpr(
        f"{key_of('id', key)} AS id",
        "id % 1000 AS qty",
        "CAST(id % 9973 AS DOUBLE) / 7 AS price",
        "concat('name-', CAST(id % 10007 AS STRING)) AS name",
        "timestamp_seconds(1700000000 + id) AS ts",
    )


def changes(spark: SparkSession, rows: int, commit: int, count: int, key: str = "int") -> DataFrame:
    """One commit's change set with an ``_op`` column (``U`` or ``D``); ids unique."""
    keys = rows + rows // 10
    if count > keys:
        raise ValueError("more changes than keys")
    return spark.range(0, count).selectExpr(
        f"{key_of(f'pmod(id * 53 + {commit * 7919}, {keys})', key)} AS id",
        f"(id + {commit}) % 1000 AS qty",
        f"CAST((id + {commit}) % 9973 AS DOUBLE) / 3 AS price",
        f"concat('changed-{commit}-', CAST(id % 101 AS STRING)) AS name",
        f"timestamp_seconds(1800000000 + id + {commit})  AS ts",
        f"CASE WHEN pmod(id * 31 + {commit}, 5) = 0 THEN 'D' ELSE 'U' END AS _op",
    )


def summary(df: DataFrame) -> list[int]:
    """Rows, sum of ids, sum of qty: equal on both sides when the tables are."""
    # A key of any --key type back to its id: a binary's bytes are its digits.
    ids = "sum(CAST(CAST(id AS STRING) AS BIGINT))"
    row = df.selectExpr("count(*)", ids, "sum(qty)").collect()[0]
    return [int(v or 0) for v in row]


def timed(fn: Callable[[], object], warm_gib: float = 0.0) -> float:
    """Seconds ``fn`` takes, after touching ``warm_gib`` GiB of fresh memory
    (``warm_memory``) outside the clock."""
    warm(warm_gib)
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def read_time(df: Callable[[], DataFrame], runs: int) -> float:
    """A full read into Spark's ``noop`` sink: best of ``runs`` after a warm-up."""
    return read_times(df, runs)[1]


def read_times(df: Callable[[], DataFrame], runs: int) -> tuple[float, float]:
    """A full read into Spark's ``noop`` sink: the warm-up read's time (what a job
    reading once sees: the JIT has compiled little of the read's code yet) and the best
    of ``runs`` after it."""
    return alternating_read_times({"read": df}, runs)["read"]


def noop_read_time(df: Callable[[], DataFrame]) -> float:
    """One full read of ``df()`` into Spark's ``noop`` sink, in seconds."""
    return timed(lambda: df().write.format("noop").mode("overwrite").save())


def alternating_read_times(
    reads: dict[str, Callable[[], DataFrame]], runs: int
) -> dict[str, tuple[float, float]]:
    """``read_times`` of several reads of one table, taking turns: each read's warm-up
    time and its best of ``runs`` after it. In turns, no read is timed only after
    another has had the JVM compile the code they share: ``format("firn")`` and
    ``firn.spark.read`` run the same merge reader, and whichever was timed second ran
    0.57 s where the first ran 0.75 s, while in turns both ran 0.73-1.03 s."""
    first = {name: noop_read_time(df) for name, df in reads.items()}
    best = dict.fromkeys(reads, float("inf"))
    for _ in range(runs):
        for name, df in reads.items():
            best[name] = min(best[name], noop_read_time(df))
    return {name: (first[name], best[name]) for name in reads}


def report(values: dict[str, object]) -> None:
    print(json.dumps(values), flush=True)
