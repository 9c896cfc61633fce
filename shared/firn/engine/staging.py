"""Turning a validated change set into change files (design §3, first step of a commit).

Rows are split by partition, by node of the change write level
(``change.buckets``) and by operation: upserts go to insert files (``I``, every table
column plus ``_ord``), deletes to delete files (``D``, the key columns plus
``_ord``). Each file is sorted by key, then ``_ord``, so its min/max key are its first
and last rows and the merge kernel can stream it. The split is one vectorised
``group_by``; no Python loop touches rows.

Staged files are not visible to anyone until the catalog registers them; the seq is
allocated then, which is why it is not in the file names. The names are chosen before
anything is written (``file_name``), so the commit can record them first: a producer
that dies half way leaves only recorded paths behind (``firn.catalog.commits``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firn.io.storage import Storage
from firn.model.changes import OP, ORD, UPSERT
from firn.model.commits import StagedFile
from firn.model.encodings import column_encodings
from firn.model.files import DEFAULT_CODEC
from firn.model.keyhash import hash_keys, node_index
from firn.model.keyspans import key_spans
from firn.model.schema import TableSchema
from firn.model.tree import ROOT, Node
from firn.model.values import keys_at, partition_path, partition_texts

_NODE = "_firn_node"

SNAPPY_BELOW_BYTES = 1 << 20
"""A zstd table's change files of less Arrow data than this are compressed with
snappy: zstd sets up a context per column chunk, which on a small commit's files cost
more than everything else in writing them (a 12-row, 7-column file: 0.47 ms to encode
against 0.15 ms; 16 such files, one commit of 200 rows over 4 partitions: 7.5 ms
against 2.5 ms), and files this small gain little from its better ratio. LZ4 (the
default codec) costs what snappy does on small files."""


def change_codec(codec: str, arrow_bytes: int) -> str:
    """The codec of a change file of ``arrow_bytes`` for a table whose
    ``file.compression`` is ``codec``: that codec, but snappy for a zstd table's small
    files (``SNAPPY_BELOW_BYTES``)."""
    return "snappy" if codec == "zstd" and arrow_bytes < SNAPPY_BELOW_BYTES else codec


@dataclass(frozen=True)
class ChangeGroup:
    """The rows of one change file before it is written."""

    partition_key: str
    partition_values: dict[str, str]
    file_type: str
    node: Node
    rows: pa.Table


def split_changes(
    table: TableSchema, change_buckets: int, changes: pa.Table, split_rows: int = 0
) -> list[ChangeGroup]:
    """The file contents of a validated change set (``validate_changes`` output). A
    partition with fewer than ``split_rows`` rows in it (``change.split-rows``) gets
    one file per operation at its root node instead of one per change node."""
    keyed = table.keyed
    # Fewer rows in all than split_rows: every partition's rows go to its root, so
    # no key is hashed and no group is made per node only to be merged again (a
    # 200-row commit over 4 partitions spent 30 % of its split on that).
    per_node = keyed and not (split_rows and changes.num_rows < split_rows)
    if per_node:
        hashes = hash_keys([changes.column(c) for c in table.primary_key])
        nodes = node_index(hashes, change_buckets)
    else:
        nodes = np.zeros(changes.num_rows, dtype=np.int64)
    tagged = changes.append_column(_NODE, pa.array(nodes, pa.int64()))
    by = [*table.partition_by, _NODE, OP]
    groups = tagged.group_by(by, use_threads=False).aggregate([(ORD, "list")])
    texts = partition_texts(groups.select(list(table.partition_by)))
    # (partition, node, operation) -> the rows' positions in the change set (_ord).
    files: dict[tuple[tuple[str, ...], Node, str], list[pa.Array]] = {}
    rows_in: dict[tuple[str, ...], int] = {}
    # Each group's columns as Python values once: a scalar taken per group and column
    # cost more than the group_by on a small commit.
    ord_lists = groups.column(f"{ORD}_list").combine_chunks()
    ord_values = ord_lists.values  # what the offsets index (a slice keeps the whole child)
    bounds = ord_lists.offsets.to_pylist()
    node_ids = groups.column(_NODE).to_pylist()
    ops = groups.column(OP).to_pylist()
    for g in range(groups.num_rows):
        ords = ord_values.slice(bounds[g], bounds[g + 1] - bounds[g])
        node = Node(change_buckets, int(node_ids[g])) if per_node else ROOT
        partition = tuple(texts[g])
        files[(partition, node, ops[g])] = [ords]
        rows_in[partition] = rows_in.get(partition, 0) + len(ords)
    if keyed and split_rows:
        files = _small_partitions_whole(files, rows_in, split_rows)
    # Every row's place in (key, _ord) order, from one sort of the whole change set:
    # each file's positions are put in that order with numpy, not by a sort of its
    # own (a sort and two takes per file were most of a small commit's split).
    sort_keys = [(c, "ascending") for c in (*table.primary_key, ORD)]
    order = pc.sort_indices(changes, sort_keys=sort_keys).to_numpy()
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    upsert_columns = changes.select([*table.schema.names, ORD])
    delete_columns = changes.select([*table.primary_key, ORD])
    out = []
    for (partition, node, op), parts in files.items():
        is_upsert = op == UPSERT
        # _ord is the row position, so the ord list indexes the change set directly.
        positions = np.concatenate([p.to_numpy() for p in parts])
        positions = positions[np.argsort(rank[positions], kind="stable")]
        rows = (upsert_columns if is_upsert else delete_columns).take(positions)
        out.append(
            ChangeGroup(
                partition_key=partition_path(table.partition_by, list(partition)),
                partition_values=dict(zip(table.partition_by, partition, strict=True)),
                file_type="I" if is_upsert else "D",
                node=node,
                rows=rows,
            )
        )
    return out


def _small_partitions_whole(
    files: dict[tuple[tuple[str, ...], Node, str], list[pa.Array]],
    rows_in: dict[tuple[str, ...], int],
    split_rows: int,
) -> dict[tuple[tuple[str, ...], Node, str], list[pa.Array]]:
    """``files`` with each partition of fewer than ``split_rows`` rows moved to its root
    node: a change file's fixed cost (a Parquet footer, a catalog row, an open for
    every reader) is most of what a few rows cost, and a task of any node reads a
    root-node file keeping only its own rows (``firn.engine.policies.folding``)."""
    whole: dict[tuple[tuple[str, ...], Node, str], list[pa.Array]] = {}
    for (partition, node, op), parts in files.items():
        at = ROOT if rows_in[partition] < split_rows else node
        whole.setdefault((partition, at, op), []).extend(parts)
    return whole


def file_name(group: ChangeGroup) -> str:
    """A new, unique path for ``group``'s file, relative to the table's location."""
    prefix = f"change/{group.partition_key}/" if group.partition_key else "change/"
    return f"{prefix}{group.file_type}-{group.node.m}-{group.node.i}-{uuid.uuid4().hex}.parquet"


def write_group(
    table: TableSchema, storage: Storage, group: ChangeGroup, path: str, codec: str = DEFAULT_CODEC
) -> StagedFile:
    """Write ``group`` at ``path`` (from ``file_name``), compressed as a table of
    ``file.compression`` ``codec`` writes change files (``change_codec``)."""
    codec = change_codec(codec, group.rows.nbytes)
    encodings = column_encodings(group.rows.schema, table.primary_key)
    size = storage.write_parquet(
        path,
        group.rows,
        encodings.encoded,
        compression=codec,
        dictionary=encodings.dictionary,
    )
    n = group.rows.num_rows
    keyed = table.keyed and n > 0
    first, last = keys_at(group.rows, table.primary_key, [0, n - 1]) if keyed else (None, None)
    return StagedFile(
        partition_key=group.partition_key,
        partition_values=group.partition_values,
        file_type=group.file_type,
        node=group.node,
        path=path,
        size_bytes=size,
        record_count=n,
        min_key=first,
        max_key=last,
        key_spans=key_spans(group.rows, table.primary_key) if keyed else None,
        schema_id=table.schema_id,
    )
