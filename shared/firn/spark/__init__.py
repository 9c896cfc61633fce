"""Firn tables in Spark: ``firn.spark.register(spark)``, then ``format("firn")``."""

from __future__ import annotations

from firn.spark.session import register
from firn.spark.source import NAME, FirnDataSource

__all__ = ["NAME", "FirnDataSource", "register"]
