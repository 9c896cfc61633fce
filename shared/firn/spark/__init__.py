"""Firn tables in Spark: ``firn.spark.register(spark)``, then ``format("firn")``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from firn.spark.source import NAME, FirnDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``format("firn")`` known to this session, and ship Firn's code to its
    executors (``firn.engine.shipping``), so a cluster's workers need only pyspark,
    pyarrow and numpy."""
    from firn.engine.shipping import ship_firn

    ship_firn(spark)
    spark.dataSource.register(FirnDataSource)


__all__ = ["NAME", "FirnDataSource", "register"]
