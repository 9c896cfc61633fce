"""Which files a filtered scan can skip, and why (before any file is opened).

Two questions are asked of a bound filter (``firn.model.filters``):

- **Partitions.** Each partition's values are a guarantee (``region == 'eu'``), and
  Arrow simplifies the filter under it: a partition whose guarantee makes the filter
  false is skipped. The simplification is Arrow's own (``Dataset.get_fragments``
  over one placeholder fragment per partition, never opened), so it is sound for any
  expression, the opaque ``pyarrow`` ones included; a partition whose path cannot be
  turned back into typed values is kept.
- **Keys.** When the filter allows only a finite set of *whole* primary keys (every
  key column pinned by ``=`` or ``IN``, under ANDs and ORs; other conjuncts only
  narrow it further), those keys are hashed (FirnHash64, ``firn.model.keyhash``), and
  a file is kept only if one of the keys of its partition falls in its tree node
  (``Node.contains`` at the file's own level: a change file at a shallow node covers
  many deep ones) and inside its recorded min/max key. So a point lookup opens the
  base files of one node whose range holds the key (one, unless folds kept files
  with deletion vectors, whose ranges may overlap the new files') and the change
  files of that node's line of the tree.

Pruning only ever drops files that cannot hold a row the filter accepts, and rows of
one key live in files of one partition and one line of the tree, so the merge of the
kept files gives, for every key that matters, the same answer as the full merge.
Parquet row-group statistics are used later, while reading (``firn.engine.splits``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from firn.model.files import FileEntry
from firn.model.filters import And, Compare, Filter, In, Literal, Or
from firn.model.keyhash import U64, hash_keys
from firn.model.schema import TableSchema
from firn.model.values import (
    KeyTuple,
    column_to_json,
    from_json,
    key_from_json,
    partition_path,
    partition_texts,
)

MAX_ROUTED_KEYS = 100_000
"""More keys than this and the filter is not used for routing (it still filters)."""

PARTITION = "partition"
KEY_NODE = "key node"
KEY_RANGE = "key range"
MERGED = "merged"
"""Reasons a file is skipped: its partition fails the filter; none of the filter's
keys hashes into its node; none is inside its min/max key; a change file already
folded into the base (seq <= its partition's max_merged_seq)."""


# -- partitions ------------------------------------------------------------------


def partition_guarantee(table: TableSchema, partition_key: str) -> pc.Expression | None:
    """What every row of a partition satisfies (``col == value`` for each partition
    column), from its path; ``None`` when the path does not read back exactly."""
    if not table.partition_by:
        return None
    parts = partition_key.split("/")
    if len(parts) != len(table.partition_by):
        return None
    guarantee = None
    for part, column in zip(parts, table.partition_by, strict=True):
        name, sep, escaped = part.partition("=")
        if not sep or unquote(name) != column:
            return None
        text = unquote(escaped)
        type_ = table.schema.field(column).type
        try:
            if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
                array = pa.array([bytes.fromhex(text)], type_)
            else:
                array = pa.array([text], pa.string()).cast(type_)
        except (pa.ArrowException, ValueError):
            return None
        if partition_texts(pa.table({column: array})) != [[text]]:
            return None
        term = pc.field(column) == pc.scalar(array[0])
        guarantee = term if guarantee is None else guarantee & term
    return guarantee


def partitions_passing(
    table: TableSchema, partitions: Iterable[str], expression: pc.Expression
) -> set[str]:
    """The partitions whose values do not rule ``expression`` out."""
    listed = sorted(set(partitions))
    if not table.partition_by:
        return set(listed)
    guarantees = [partition_guarantee(table, p) for p in listed]
    fmt = ds.ParquetFileFormat()
    fs = pafs.LocalFileSystem()
    fragments = [
        fmt.make_fragment(
            f"/firn-partition/{n}",
            filesystem=fs,
            partition_expression=pc.scalar(True) if g is None else g,
        )
        for n, g in enumerate(guarantees)
    ]
    dataset = ds.FileSystemDataset(fragments, table.schema, fmt, fs)
    kept = {int(f.path.rsplit("/", 1)[1]) for f in dataset.get_fragments(filter=expression)}
    return {p for n, p in enumerate(listed) if n in kept}


# -- keys ------------------------------------------------------------------------

Constraint = dict[str, frozenset[Any]]
"""Allowed values per key column (a column not named is unconstrained)."""


def _disjuncts(f: Filter, key: Sequence[str]) -> list[Constraint] | None:
    """The filter as an OR of per-column value sets over key columns, a superset of
    the rows it accepts; ``None`` when it does not constrain keys that way."""
    if isinstance(f, Compare):
        return [{f.column: frozenset([f.value])}] if f.op == "=" and f.column in key else None
    if isinstance(f, In):
        return [{f.column: frozenset(f.values)}] if f.column in key else None
    if isinstance(f, And):
        result: list[Constraint] = [{}]
        for part in f.parts:
            sides = _disjuncts(part, key)
            if sides is None:
                continue  # an unanalysed conjunct only narrows the result further
            result = [c for a in result for b in sides if (c := _both(a, b)) is not None]
            if len(result) > MAX_ROUTED_KEYS:
                return None
        return result
    if isinstance(f, Or):
        out: list[Constraint] = []
        for part in f.parts:
            sides = _disjuncts(part, key)
            if sides is None:
                return None
            out.extend(sides)
        return out
    return None


def _both(a: Constraint, b: Constraint) -> Constraint | None:
    merged = dict(a)
    for column, values in b.items():
        merged[column] = merged[column] & values if column in merged else values
        if not merged[column]:
            return None
    return merged


def routed_keys(f: Filter | None, table: TableSchema) -> list[tuple[Literal, ...]] | None:
    """The whole primary keys ``f`` allows, in key-column order, when it allows a
    finite set of at most ``MAX_ROUTED_KEYS``; ``None`` when it does not pin every
    key column (an empty list: it allows no key at all)."""
    if f is None or not table.keyed:
        return None
    key = table.primary_key
    disjuncts = _disjuncts(f, key)
    if disjuncts is None or any(len(c) < len(key) for c in disjuncts):
        return None
    keys: set[tuple[Literal, ...]] = set()
    for c in disjuncts:
        size = int(np.prod([len(c[k]) for k in key], dtype=np.float64))
        if len(keys) + size > MAX_ROUTED_KEYS:
            return None
        keys.update(itertools.product(*(sorted(c[k], key=repr) for k in key)))
    return sorted(keys, key=repr)


@dataclass(frozen=True)
class KeyRouter:
    """The routed keys, hashed and placed, to test files against."""

    hashes: U64
    partitions: npt.NDArray[np.object_]
    """The partition path of each key."""
    keys: list[KeyTuple]
    """Each key as comparable values (``firn.model.values``), for min/max checks."""

    @classmethod
    def build(cls, table: TableSchema, keys: Sequence[tuple[Literal, ...]]) -> KeyRouter:
        columns = {
            name: pa.array([k[n] for k in keys], table.schema.field(name).type)
            for n, name in enumerate(table.primary_key)
        }
        rows = pa.table(columns)
        hashes = (
            hash_keys([rows.column(c) for c in table.primary_key])
            if keys
            else np.zeros(0, np.uint64)
        )
        texts = partition_texts(rows.select(list(table.partition_by)))
        partitions = np.array([partition_path(table.partition_by, t) for t in texts], object)
        comparable = [
            [from_json(v, rows.column(c).type) for v in column_to_json(rows.column(c))]
            for c in table.primary_key
        ]
        return cls(hashes, partitions, [tuple(k) for k in zip(*comparable, strict=True)])

    def why_not(self, entry: FileEntry, key_schema: pa.Schema) -> str | None:
        """Why ``entry`` holds none of the keys (a reason above), or ``None`` if it
        may hold one."""
        here: npt.NDArray[np.bool_] = np.asarray(self.partitions == entry.partition_key, bool)
        if not here.any():
            return PARTITION
        here &= entry.node.contains(self.hashes)
        if not here.any():
            return KEY_NODE
        if entry.min_key is None or entry.max_key is None:
            return None
        low = key_from_json(entry.min_key, key_schema)
        high = key_from_json(entry.max_key, key_schema)
        if any(low <= self.keys[n] <= high for n in np.flatnonzero(here)):
            return None
        return KEY_RANGE
