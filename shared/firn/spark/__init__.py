"""Firn tables in Spark: ``firn.spark.register(spark)``, then ``format("firn")``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from firn.spark.source import NAME, FirnDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``format("firn")`` known to this session (once per session)."""
    spark.dataSource.register(FirnDataSource)


__all__ = ["NAME", "FirnDataSource", "register"]
