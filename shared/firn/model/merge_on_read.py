"""The merged view of a keyed table (design §2, "the one truth"), in vectorised Arrow.

For each key, the change rows with seq > max_merged_seq of their partition compete;
the greatest LSN ``(seq, _ord)`` decides: an upsert gives its row, a delete gives
absence. Keys with no such change row keep their base row.

How, without a per-row Python loop:

1. the inserts' and deletes' key columns are stacked, with the LSN beside them (one
   combined int64 ``seq * (max_ord + 1) + _ord`` when it fits, which sorts like the
   pair and is much cheaper to sort on);
2. they are sorted by key, then LSN descending, and the first row of each run of
   equal keys is the winner (run starts found by comparing each key column with its
   shifted self); only the key columns are ever permuted;
3. base rows whose key has a winner are dropped (one hash anti-join; for one integer
   key column, a numpy membership test and a filter), and the winning upserts are
   appended.

The compaction kernel applies the same rule to the same inputs, so this module is
also the reference it is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from firn.model.changes import ORD
from firn.model.schema import TableSchema

SEQ = "_seq"
_LSN = "_firn_lsn"


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


@dataclass(frozen=True)
class Winners:
    """The winning change row of every changed key, in key order."""

    keys: pa.Table
    """The key columns of the winners."""
    upsert: npt.NDArray[np.bool_]
    """Whether each winner is an upsert (else a delete)."""
    row: npt.NDArray[np.int64]
    """Each winner's row in the inserts (for upserts) or the deletes (for deletes)."""


def lsn_sort_keys(seq: npt.NDArray[np.int64], ord_: npt.NDArray[np.int64]) -> pa.Table:
    """Columns that sort like the LSN ``(seq, _ord)``: one combined int64 when it fits
    (sorting one column is much cheaper than two), else the two columns."""
    if len(seq) == 0:
        return pa.table({_LSN: pa.array([], pa.int64())})
    width = int(ord_.max()) + 1
    if int(seq.max()) < (2**62) // width:
        return pa.table({_LSN: pa.array(seq * width + ord_)})
    return pa.table({_LSN: pa.array(seq), f"{_LSN}_ord": pa.array(ord_)})


def latest_positions(
    keys: pa.Table, seq: npt.NDArray[np.int64], ord_: npt.NDArray[np.int64]
) -> pa.Array:
    """For rows with these key columns and LSNs, the position of each key's
    greatest-LSN row, in key order. Only the key columns are sorted and permuted."""
    lsn = lsn_sort_keys(seq, ord_)
    sortable = keys
    for name in lsn.column_names:
        sortable = sortable.append_column(name, lsn.column(name))
    order = pc.sort_indices(
        sortable,
        sort_keys=[
            *((c, "ascending") for c in keys.column_names),
            *((c, "descending") for c in lsn.column_names),
        ],
    )
    return order.take(run_starts(keys.take(order)))


def latest_per_key(table: TableSchema, inserts: pa.Table, deletes: pa.Table) -> Winners:
    """The greatest-LSN change row of every key among ``inserts`` and ``deletes``."""
    key = list(table.primary_key)
    n_inserts = inserts.num_rows
    # One chunk per column: sorting and taking across hundreds of file-sized chunks
    # costs several times more than on one contiguous array.
    keys = pa.concat_tables(
        [inserts.select(key), deletes.select(key).cast(inserts.select(key).schema)]
    ).combine_chunks()
    seq = np.concatenate([_numpy(inserts, SEQ), _numpy(deletes, SEQ)])
    ord_ = np.concatenate([_numpy(inserts, ORD), _numpy(deletes, ORD)])
    positions = latest_positions(keys, seq, ord_)
    event = positions.to_numpy()
    upsert = event < n_inserts
    return Winners(keys.take(positions), upsert, np.where(upsert, event, event - n_inserts))


def _numpy(rows: pa.Table, column: str) -> npt.NDArray[np.int64]:
    return np.asarray(rows.column(column).to_numpy(), dtype=np.int64)


def merge(
    table: TableSchema, base: pa.Table | None, inserts: pa.Table, deletes: pa.Table
) -> pa.Table:
    """The merged view: ``base`` (table columns) with the unmerged ``inserts`` (table
    columns, ``_seq``, ``_ord``) and ``deletes`` (key columns, ``_seq``, ``_ord``)."""
    names = table.schema.names
    if not table.keyed:
        parts = [t.select(names) for t in (base, inserts) if t is not None]
        return pa.concat_tables(parts).cast(table.schema) if parts else table.schema.empty_table()
    if inserts.num_rows == 0 and deletes.num_rows == 0:
        # A compacted partition: nothing to resolve, so no sort and no join.
        if base is None:
            return table.schema.empty_table()
        return base.select(names).cast(table.schema)
    winners = latest_per_key(table, inserts, deletes)
    upserted = inserts.select(names).take(pa.array(winners.row[winners.upsert]))
    if base is None or base.num_rows == 0:
        return upserted.cast(table.schema)
    key = list(table.primary_key)
    if _one_integer_key(table):
        # One integer key: a numpy membership test of the base keys in the winners'
        # and one filter, instead of Arrow's hash join, which builds a hash table and
        # probes it on threads: 15-18 % less CPU for a whole merged read (5M base
        # rows, 1M changes), what a Spark read before compaction is bound by.
        gone = np.isin(_numpy(base, key[0]), _numpy(winners.keys, key[0]))
        kept = base.select(names).filter(pa.array(~gone))
    else:
        kept = base.select(names).join(
            winners.keys, keys=key, join_type="left anti", use_threads=True
        )
    # The join drops the key columns' non-null flags; restore the table's schema.
    return pa.concat_tables([kept.select(names).cast(table.schema), upserted.cast(table.schema)])


def _one_integer_key(table: TableSchema) -> bool:
    key = table.primary_key
    return len(key) == 1 and pa.types.is_integer(table.schema.field(key[0]).type)
