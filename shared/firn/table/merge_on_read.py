"""The merged view of a keyed table (SPEC 2, "the one truth"), in vectorised Arrow.

For each key, the change rows with seq > max_merged_seq of their partition compete;
the greatest LSN ``(seq, _ord)`` decides: an upsert gives its row, a delete gives
absence. Keys with no such change row keep their base row.

How, without a per-row Python loop:

1. every change row becomes an *event* (key columns, ``_seq``, ``_ord``, whether it is
   an upsert, and its position among the upserts);
2. the events are sorted by key, then LSN descending, and the first event of each run
   of equal keys is the winner (run starts found by comparing each key column with
   its shifted self);
3. base rows whose key has a winner are dropped (one hash anti-join), and the winning
   upserts are appended.

The compaction kernel applies the same rule to the same inputs, so this module is
also the reference it is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firn.table.changes import ORD
from firn.table.schema import TableSchema

SEQ = "_seq"
_UPSERT = "_firn_upsert"
_ROW = "_firn_row"


def run_starts(sorted_keys: pa.Table) -> pa.Array:
    """Positions where a run of equal keys begins, in a table sorted by those keys."""
    n = sorted_keys.num_rows
    if n == 0:
        return pa.array([], pa.int64())
    starts = np.zeros(n, dtype=bool)
    starts[0] = True
    for column in sorted_keys.columns:
        column = column.combine_chunks()
        differs = pc.not_equal(column.slice(1), column.slice(0, n - 1))
        starts[1:] |= differs.to_numpy(zero_copy_only=False)
    return pa.array(np.flatnonzero(starts), pa.int64())


def latest_per_key(table: TableSchema, inserts: pa.Table, deletes: pa.Table) -> pa.Table:
    """The winning event of every changed key: key columns, ``_seq``, ``_ord``, whether
    it is an upsert, and (for upserts) its row in ``inserts``."""
    key = list(table.primary_key)
    events = pa.concat_tables(
        [
            inserts.select([*key, SEQ, ORD])
            .append_column(_UPSERT, pa.array(np.ones(inserts.num_rows, dtype=bool)))
            .append_column(_ROW, pa.array(np.arange(inserts.num_rows, dtype=np.int64))),
            deletes.select([*key, SEQ, ORD])
            .append_column(_UPSERT, pa.array(np.zeros(deletes.num_rows, dtype=bool)))
            .append_column(_ROW, pa.array(np.full(deletes.num_rows, -1, dtype=np.int64))),
        ]
    )
    order = pc.sort_indices(
        events,
        sort_keys=[*((c, "ascending") for c in key), (SEQ, "descending"), (ORD, "descending")],
    )
    ordered = events.take(order)
    return ordered.take(run_starts(ordered.select(key)))


def merge(
    table: TableSchema, base: pa.Table | None, inserts: pa.Table, deletes: pa.Table
) -> pa.Table:
    """The merged view: ``base`` (table columns) with the unmerged ``inserts`` (table
    columns, ``_seq``, ``_ord``) and ``deletes`` (key columns, ``_seq``, ``_ord``)."""
    names = table.schema.names
    if not table.keyed:
        parts = [t.select(names) for t in (base, inserts) if t is not None]
        return pa.concat_tables(parts) if parts else table.schema.empty_table()
    winners = latest_per_key(table, inserts, deletes)
    upserted = inserts.select(names).take(pc.filter(winners.column(_ROW), winners.column(_UPSERT)))
    if base is None or base.num_rows == 0:
        return upserted.cast(table.schema)
    key = list(table.primary_key)
    kept = base.select(names).join(
        winners.select(key), keys=key, join_type="left anti", use_threads=True
    )
    # The join drops the key columns' non-null flags; restore the table's schema.
    return pa.concat_tables([kept.select(names).cast(table.schema), upserted.cast(table.schema)])


def with_seq(rows: pa.Table, seq: int) -> pa.Table:
    """Change rows with their row-level seq: the file's ``_seq`` column when it has one
    (minor compaction output), else the file's seq for every row."""
    if SEQ in rows.column_names:
        return rows
    return rows.append_column(SEQ, pa.array(np.full(rows.num_rows, seq, dtype=np.int64)))


def unmerged(rows: pa.Table, max_merged_seq: int) -> pa.Table:
    """The change rows not yet folded into the base store."""
    return rows.filter(pc.greater(rows.column(SEQ), max_merged_seq))


def concat_or_empty(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty_table()
