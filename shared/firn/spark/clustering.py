"""``firn.spark.write(df, name, "append")``: an append's rows shuffled by change node
first, so that each node's rows (in each partition) reach one task and the append
writes one change file per partition, node and operation, however many tasks the
DataFrame has.

Why: each task of a ``format("firn")`` append splits its own rows by partition, node
and operation (``firn.spark.tasks``), so a DataFrame of T tasks writes up to T files
per node and operation, and every read before the next compaction opens them all:
ten 100k-row appends of a two-task DataFrame left 160 change files on a four-node
table, and opening a file cost a JVM read about as much as decoding 6,000 of its rows
(``bench/README.md``, "Spark users"). Iceberg's ``write.distribution-mode=hash``
shuffles for the same reason.

How: the key's node (``firn.model.keyhash.node_index``) is computed in Spark by the
jar's ``firn_change_node`` (``org.firn.spark.ChangeNode``), and the rows repartitioned
by it and the partition columns; adaptive query execution (on by default) joins the
shuffle's small partitions into tasks of about
``spark.sql.adaptive.advisoryPartitionSizeInBytes``. Only the number of files depends
on it: each task still places every row itself, so rows this cannot place (a key type
below, a session without the jar, Spark Connect) are written unshuffled, and the table
ends the same either way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from firn.api.table import Table
from firn.spark import jvm

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

FUNCTION = "firn_change_node"
FUNCTION_CLASS = "org.firn.spark.ChangeNode"


def by_change_node(df: DataFrame, table: Table) -> DataFrame:
    """``df`` repartitioned so that each (partition, change node) of ``table`` is in
    one Spark partition; ``df`` itself when that cannot be done (``key_lanes``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    definition = table.definition
    level = table.properties.change_buckets
    if not definition.keyed or level <= 1 or not jvm.loaded(df.sparkSession):
        return df
    lanes = key_lanes(df, table)
    if lanes is None:
        return df
    df.sparkSession.udf.registerJavaFunction(FUNCTION, FUNCTION_CLASS, IntegerType())
    node = F.call_function(FUNCTION, F.struct(*lanes), F.lit(level))
    return df.repartition(*[F.col(c) for c in definition.partition_by], node)


def key_lanes(df: DataFrame, table: Table) -> list[Column] | None:
    """The key columns of ``df`` as FirnHash64 reads them (integers as they are,
    dates as days, timestamps as microseconds, strings and binaries as they are), or
    None when a column's type in ``df`` or in the table is not one of those (the task's
    cast would change the value hashed)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        BinaryType,
        ByteType,
        DateType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        TimestampType,
    )

    schema = table.definition.schema
    spark_types = {f.name: f.dataType for f in df.schema.fields}
    lanes = []
    for name in table.definition.primary_key:
        given, stored = spark_types.get(name), schema.field(name).type
        if isinstance(given, (LongType, IntegerType, ShortType, ByteType)) and (
            pa.types.is_signed_integer(stored)
        ):
            lanes.append(F.col(name))
        elif isinstance(given, DateType) and pa.types.is_date32(stored):
            lanes.append(F.unix_date(F.col(name)))
        elif (
            isinstance(given, TimestampType)
            and pa.types.is_timestamp(stored)
            and stored.unit == "us"
            and stored.tz is not None
        ):
            lanes.append(F.unix_micros(F.col(name)))
        elif (
            isinstance(given, StringType)
            and (pa.types.is_string(stored) or pa.types.is_large_string(stored))
        ) or (isinstance(given, BinaryType) and pa.types.is_binary(stored)):
            lanes.append(F.col(name))  # hashed by their bytes as they are
        else:
            log.info(
                "%s: an append is not shuffled by change node: key column %r is %s in the "
                "DataFrame and %s in the table",
                table.name,
                name,
                given,
                stored,
            )
            return None
    return lanes
