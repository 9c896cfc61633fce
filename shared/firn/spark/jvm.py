"""The JVM merge reader (``jvm/``, built into ``firn/spark/jars/firn-spark.jar``): the
splits that merge, read inside Spark's JVM instead of a Python worker.

Why a JVM piece: handing 5M merged rows from a Python source to Spark costs about what
Iceberg's connector takes for its whole read, so no Python merge gets a Spark read
before compaction near Iceberg's (``docs/proposals/jvm-merge-reader.md`` has the
measurements). The JVM reader opens a split's files with Spark's vectorised Parquet
reader, keeps each changed key's winning change in a hash map, streams the base rows
past it (the rows a change replaces or a deletion vector hides left out of each batch
by a selection, not copied) and ends with the winning upserts: no Python, no Arrow
hand-off.

It takes the splits ``jvm_mergeable`` accepts (one partition, a key of one integer,
date or microsecond timestamp column besides the partition columns, every file of
the read's schema version, no filter, files a Hadoop file system names:
``firn.spark.hadoop``), deletion vectors included;
``firn.spark.read`` sends the others to the ``firn`` Python source as before. It is
used when the session has the jar: Firn's own sessions (``firn.engine.spark_session``)
add it; a session of your own adds ``jar_path()`` to ``spark.jars`` before it starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from firn.engine.jars import SPARK_JAR, spark_jar
from firn.engine.scan import unmerged_changes
from firn.engine.splits import Split
from firn.model.files import FileEntry
from firn.model.keyhash import hash_keys
from firn.model.tree import ROOT
from firn.model.values import to_arrow
from firn.spark.hadoop import hadoop_scheme, hadoop_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "firn-merge"
"""The JVM reader's Spark format name."""

SOURCE_CLASS = "org.firn.spark.MergeSource"

JAR = SPARK_JAR
"""Where ``jvm/build.sh`` (run by ``make setup``) puts the jar."""


def jar_path() -> Path | None:
    """The built jar, or None when it has not been built (``make setup``)."""
    return spark_jar()


def loaded(spark: SparkSession) -> bool:
    """Whether ``spark`` can load the JVM reader (its jar was on ``spark.jars`` when
    the session started). A Spark Connect session, which has no JVM here, cannot."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        jvm.java.lang.Class.forName(
            SOURCE_CLASS, False, jvm.Thread.currentThread().getContextClassLoader()
        )
    except Exception:
        return False
    return True


def jvm_mergeable(split: Split, schema_id: int) -> bool:
    """Whether the JVM reader returns exactly what ``split.read()`` does: a merged
    (not a change) split of one partition without a filter, of a table whose key is
    one integer, date, microsecond timestamp, string, binary or decimal column after the
    partition columns (the partition's rows differ in that column alone), on local
    storage, every file written under ``schema_id``, and column types Spark's Parquet
    reader reads as the source would."""
    table = split.table
    if split.changes or split.filter is not None or not table.keyed:
        return False
    key = table.primary_key
    # Within one partition its columns are constant: the key's last column alone decides.
    if split.partition is None or any(c not in table.partition_by for c in key[:-1]):
        return False
    if not jvm_key_type(table.schema.field(key[-1]).type):
        return False
    if hadoop_scheme(split.location) is None:
        return False
    changes = unmerged_changes(split.files, split.merged_seqs)
    base = [e for e in split.files if e.store == "base"]
    if any(e.schema_id != schema_id for e in [*base, *changes]):
        return False
    if len(key) > 1 and _prefix(split) is None:
        return False
    return all(alike(table.schema.field(n).type) for n in split.columns)


def jvm_key_type(t: pa.DataType) -> bool:
    """Whether the JVM reader takes a key column of this type: one it reads as the integer
    FirnHash64 hashes (``firn.model.keyhash``) and Firn orders by: an integer (not
    unsigned 64-bit), a date (days) or a microsecond timestamp; a string or binary,
    whose bytes (a string's UTF-8) it hashes and orders by, as Firn does; or a decimal128,
    by its unscaled value (``DecimalKeys`` on the JVM side). A millisecond timestamp is
    not: Spark reads it as microseconds, which hash otherwise."""
    if pa.types.is_timestamp(t):
        return bool(t.unit == "us")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return True
    if pa.types.is_decimal128(t):
        return True
    return (pa.types.is_integer(t) and not pa.types.is_uint64(t)) or pa.types.is_date32(t)


def _prefix(split: Split) -> int | None:
    """The key hash folded over the key's partition columns (all but the last, the same
    for every row of the split), as FirnHash64 folds a composite key, for the JVM side to
    finish with the last column (``firn.model.keyhash.hash_keys``); None when no file
    of the split records its key range."""
    key = split.table.primary_key
    entry = next((e for e in split.files if e.min_key is not None), None)
    if entry is None or entry.min_key is None:
        return None
    schema = split.table.schema
    columns = [to_arrow([entry.min_key[j]], schema.field(c).type) for j, c in enumerate(key[:-1])]
    folded = hash_keys(columns)
    return int(folded.view(np.int64)[0])


def read_plan(
    tasks: Sequence[Sequence[Split]],
    schema: pa.Schema,
    spark_json: Callable[[pa.Schema], Any],
    snapshot: int,
) -> str:
    """The JVM reader's option ``plan`` (``org.firn.spark.ReadPlan``): the snapshot
    read, each task's splits with their partition, node and files, the key, the columns
    returned (``schema``) and the columns read (the key too, when it is not returned),
    as Spark types (``spark_json``: a schema's Spark ``StructType`` as JSON data)."""
    first = tasks[0][0]
    key = first.table.primary_key[-1]
    read = schema if key in schema.names else schema.append(first.table.schema.field(key))
    return json.dumps(
        {
            "snapshot": snapshot,
            "key": key,
            "schema": spark_json(schema),
            "read": spark_json(read),
            "tasks": [[_split(s) for s in task] for task in tasks],
        }
    )


def _split(split: Split) -> dict[str, Any]:
    node = split.node if split.node is not None else ROOT
    return {
        "partition": split.partition or "",
        "node": [node.m, node.i],
        "prefix": _prefix(split) if len(split.table.primary_key) > 1 else None,
        "base": [_base(split.location, e) for e in split.files if e.store == "base"],
        "changes": [
            {
                **_file(split.location, e),
                "rows": e.record_count,
                "type": e.file_type,
                "seq": e.seq,
                "floor": split.merged_seqs.get(e.partition_key, 0),
                "shared": e.node.m < node.m,
            }
            for e in unmerged_changes(split.files, split.merged_seqs)
        ],
    }


def _base(location: str, entry: FileEntry) -> dict[str, Any]:
    vector = entry.deletion_vector
    hidden = None
    if vector is not None:
        path = hadoop_uri(location, vector.path)
        hidden = {"path": path, "size": vector.size_bytes, "rows": vector.rows}
    return {**_file(location, entry), "rows": entry.record_count, "vector": hidden}


def _file(location: str, entry: FileEntry) -> dict[str, Any]:
    return {"path": hadoop_uri(location, entry.path), "size": entry.size_bytes}


def alike(t: pa.DataType) -> bool:
    """Types Spark's Parquet reader returns as the ``firn`` source does (``spark_type``),
    which the native part and the JVM reader both read with it:
    not unsigned 64-bit, nanosecond timestamps, nested or dictionary types."""
    if pa.types.is_timestamp(t):
        return t.unit in ("ms", "us")
    return (
        (pa.types.is_integer(t) and not pa.types.is_uint64(t))
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date32(t)
        or pa.types.is_decimal(t)
    )
