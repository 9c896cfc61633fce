"""The ``firn`` data source for Spark 4 (PySpark's Python Data Source API).

    firn.spark.register(spark)
    df = spark.read.format("firn").load("orders")                         # merged view
    spark.read.format("firn").option("snapshot", 12).load("orders")          # an older one
    spark.read.format("firn").option("start_snapshot", 12).load("orders")    # changes
    df.write.format("firn").mode("append").save("orders")         # one change set
    df.write.format("firn").mode("overwrite").save("orders")      # a bulk load
    df.writeStream.format("firn").option("checkpointLocation", ...).start("orders")

The class only delegates. Reading lives in ``firn.spark.reader``: Spark plans the
splits in a Python worker on the driver's machine and reads one split (or a few small
ones) per Spark partition on executors. Spark calls ``writer``/``streamWriter`` and
``commit``/``abort`` in Python workers on the driver's machine (``firn.spark.jobs``:
the catalog is reached there), and ``write`` in tasks on executors
(``firn.spark.tasks``: files only). The data source class and the writers are
pickled to executors, so this module imports neither the catalog nor the API at
module level.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from firn.model.commits import StreamBatch
from firn.spark.options import WriteOptions
from firn.spark.tasks import WriteJob, write_task

NAME = "firn"

BEHIND_JVM = "firn-python"
"""The Python source's name in a session whose JVM has Firn's jar: there ``firn`` is the
JVM's ``org.firn.spark.FirnSource``, which reads what the merge reader takes whole and
hands every other call to the source of this name (``firn.spark.jvm_format``)."""


class FirnDataSource(DataSource):
    """Firn tables, by name (``.load(name)``, ``.save(name)``); options in
    ``firn.spark.reader`` and ``firn.spark.options``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> FirnWriter:
        from firn.spark.jobs import open_job

        job, opts = open_job(self.options, _arrow(schema), overwrite=overwrite, stream=False)
        return FirnWriter(job, opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> FirnStreamWriter:
        from firn.spark.jobs import open_job

        job, opts = open_job(self.options, _arrow(schema), overwrite=overwrite, stream=True)
        return FirnStreamWriter(job, opts)

    def schema(self) -> StructType:
        from firn.spark.reader import read_schema

        return read_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from firn.spark.reader import firn_reader

        return firn_reader(self.options, schema)


class FirnWriter(DataSourceArrowWriter):
    """A batch write: one change set (append) or one load (overwrite)."""

    def __init__(self, job: WriteJob, opts: WriteOptions) -> None:
        self.job = job
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_task(self.job, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from firn.spark.jobs import commit_job

        commit_job(self.job, self.opts, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from firn.spark.jobs import abort_job

        abort_job(self.job, self.opts, messages)


class FirnStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write: one change set per micro-batch, each committed once."""

    def __init__(self, job: WriteJob, opts: WriteOptions) -> None:
        self.job = job
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_task(self.job, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from firn.spark.jobs import commit_job

        assert self.opts.stream_id is not None  # write_options insists on one
        commit_job(self.job, self.opts, messages, batch=StreamBatch(self.opts.stream_id, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from firn.spark.jobs import abort_job

        abort_job(self.job, self.opts, messages, stream=True)


def _arrow(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class FirnBehindJvm(FirnDataSource):
    """``FirnDataSource`` under ``BEHIND_JVM``: Spark refuses a Python source of a name a
    JVM source already has."""

    @classmethod
    def name(cls) -> str:
        return BEHIND_JVM
