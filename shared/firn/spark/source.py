"""The ``firn`` data source for Spark 4 (PySpark's Python Data Source API).

    firn.spark.register(spark)
    spark.read.format("firn").load("orders")                            # merged view
    spark.read.format("firn").option("snapshot", 12).load("orders")     # an older one
    spark.read.format("firn").option("start_snapshot", 12).load("orders")  # changes

The class only delegates: reading lives in ``firn.spark.reader``. Spark pickles the
data source to its Python workers, so this module imports neither the catalog nor
the API at module level.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

NAME = "firn"


class FirnDataSource(DataSource):
    """Firn tables, by name (``.load(name)``); options in ``firn.spark.reader``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from firn.spark.reader import read_schema

        return read_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from firn.spark.reader import firn_reader

        return firn_reader(self.options, schema)
