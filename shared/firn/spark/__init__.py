"""Firn tables in Spark: ``firn.spark.register(spark)``, then ``format("firn")``, or
``firn.spark.read(spark, name)`` (compacted splits read by Spark's Parquet reader)."""

from __future__ import annotations

from firn.spark.native import read
from firn.spark.session import register
from firn.spark.source import NAME, FirnDataSource

__all__ = ["NAME", "FirnDataSource", "read", "register"]
