"""Firn tables in Spark: ``firn.spark.register(spark)``, then ``format("firn")``, or
``firn.spark.read(spark, name)`` (splits read by Spark's Parquet reader and the JVM
merge reader) and ``firn.spark.write(df, name, mode)`` (loads written in the JVM)."""

from __future__ import annotations

from firn.spark.load import write
from firn.spark.native import read
from firn.spark.session import register
from firn.spark.source import NAME, FirnDataSource

__all__ = ["NAME", "FirnDataSource", "read", "register", "write"]
