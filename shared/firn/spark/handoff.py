"""Which splits of a read Spark's own Parquet reader returns exactly as the ``firn``
source would (``firn.spark.native`` reads those, the source with ``splits=merging``
the rest): one rule, imported by both sides so that they part a snapshot's splits
the same way."""

from __future__ import annotations

import pyarrow as pa

from firn.engine.scan import unmerged_changes
from firn.engine.splits import Split

MERGING = "merging"
"""The ``firn`` source's ``splits`` option value that keeps only the splits
``natively_readable`` refuses."""


def natively_readable(split: Split, schema_id: int) -> bool:
    """Whether Spark's own Parquet reader returns exactly what ``split.read()`` does:
    nothing to merge (base files only count), every base file written under the
    read's schema version ``schema_id`` (older ones are read by field id) and without
    a deletion vector, no filter in the split (the native part takes Spark's),
    column types read alike, and a local location (Spark names object stores its own
    way: ``s3a://``).

    A deletion vector keeps its split with the ``firn`` source: dropping its rows in
    Spark (each row tagged with ``_metadata.row_index``, a broadcast anti join on the
    hidden positions) was slower than the source, not faster: 5M rows in four files,
    200k hidden in each, ``local[2]``: 8-11 s against 3.6 s for the plain Parquet
    read, the tagging alone 5.3 s."""
    if split.changes or split.filter is not None:
        return False
    if unmerged_changes(split.files, split.merged_seqs):
        return False
    if "://" in split.location and not split.location.startswith("file://"):
        return False
    base = [e for e in split.files if e.store == "base"]
    if any(e.schema_id != schema_id or e.deletion_vector is not None for e in base):
        return False
    return all(_alike(split.table.schema.field(n).type) for n in split.columns)


def _alike(t: pa.DataType) -> bool:
    """Types Spark's Parquet reader returns as the ``firn`` source does (``spark_type``):
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
