"""Which splits of a read Spark's own Parquet reader returns exactly as the ``firn``
source would (``firn.spark.native`` reads those, the source with ``splits=merging``
the rest): one rule, imported by both sides so that they part a snapshot's splits
the same way."""

from __future__ import annotations

from firn.engine.scan import unmerged_changes
from firn.engine.splits import Split
from firn.spark.hadoop import hadoop_scheme
from firn.spark.jvm import alike, jvm_mergeable

MERGING = "merging"
"""The ``firn`` source's ``splits`` option value that keeps only the splits
``natively_readable`` refuses."""

PYTHON = "python"
"""The ``splits`` option value that keeps only the splits neither Spark's Parquet
reader nor the JVM merge reader (``firn.spark.jvm``) takes: what ``firn.spark.read``
asks of the ``firn`` source when the session has the JVM reader."""


def kept(split: Split, schema_id: int, splits: str) -> bool:
    """Whether a ``firn`` read with option ``splits`` (all, merging, python) reads
    ``split``: the one rule that parts a snapshot's splits among the readers."""
    if splits == "all":
        return True
    if natively_readable(split, schema_id):
        return False
    if splits == PYTHON:
        return not jvm_mergeable(split, schema_id)
    return True


def natively_readable(split: Split, schema_id: int) -> bool:
    """Whether Spark's own Parquet reader returns exactly what ``split.read()`` does:
    nothing to merge (base files only count), every base file written under the
    read's schema version ``schema_id`` (older ones are read by field id) and without
    a deletion vector, no filter in the split (the native part takes Spark's),
    column types read alike, and a store Hadoop's file systems name
    (``firn.spark.hadoop``: local files, S3 as ``s3a://``, GCS, HDFS, Azure). Whether
    the session has that file system is the reader's to check (``hadoop.reaches``):
    one without it reads every split with the source (``splits=all``).

    A deletion vector keeps its split from Spark's reader (the JVM merge reader or
    the ``firn`` source read it): dropping its rows in Spark (each row tagged with
    ``_metadata.row_index``, a broadcast anti join on the
    hidden positions) was slower than the source, not faster: 5M rows in four files,
    200k hidden in each, ``local[2]``: 8-11 s against 3.6 s for the plain Parquet
    read, the tagging alone 5.3 s."""
    if split.changes or split.filter is not None:
        return False
    if unmerged_changes(split.files, split.merged_seqs):
        return False
    if hadoop_scheme(split.location) is None:
        return False
    base = [e for e in split.files if e.store == "base"]
    if any(e.schema_id != schema_id or e.deletion_vector is not None for e in base):
        return False
    return all(alike(split.table.schema.field(n).type) for n in split.columns)
