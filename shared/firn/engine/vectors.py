"""Folding changes into base files without rewriting them: which base files a fold
task keeps, each with a deletion vector (``firn.io.deletion_vectors``), and which it
rewrites. Paimon's deletion-vector mode, Iceberg v3's deletion vectors, the delete
bitmap of Doris's merge-on-write tables.

A fold task reads every base file whose key range its changes meet. Rewriting them
all costs the whole base each time a few keys change (an event log's late updates
touch every file); with ``TaskSpec.vector_ratio`` above 0 the kernel first looks up,
per base file of the task's node, which of its rows the task's changes replace (its
key columns against the keys of the task's change rows), and then:

- none: the file is kept as it is;
- some: the file is kept with a vector hiding them too, while the vector then hides
  less than ``vector_ratio`` of its rows and the file is not tiny (``small_file_bytes``,
  the table's ``deletion-vectors.min-file-bytes``); the changes' rows for those keys go
  to the task's new base files like any other. Otherwise the file is rewritten.

Base files at a shallower level are always rewritten (they are re-bucketed, and
several tasks read them). A kept file is an output naming its input
(``OutputFile.replaces``): the committer leaves it live, or gives it the new vector
(``firn.catalog.vectors``), and removes only the rewritten ones. Every key keeps one
live base row: a replaced row is hidden in the same commit that adds its successor.

Executor-safe: pyarrow and numpy only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firn.io.deletion_vectors import Positions, read_positions, write_positions
from firn.io.file_cache import FileCache
from firn.io.integrity import read_batches
from firn.io.storage import Storage
from firn.model.files import DeletionVector
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, OutputFile, TaskSpec, may_carry_vector

POSITION = "_pos"
KEY_BATCH_ROWS = 1 << 16


@dataclass
class BaseChoice:
    """What a fold task does with its base files."""

    rewrite: list[InputFile] = field(default_factory=list)
    """Merged with the changes into new base files."""
    kept: list[OutputFile] = field(default_factory=list)
    """Kept as they are, each with the vector it has from now on."""
    written: list[str] = field(default_factory=list)
    """Vector files this attempt wrote (to delete if the attempt fails)."""


def choose_base(
    storage: Storage, table: TableSchema, spec: TaskSpec, attempt: int, changed: pa.Table
) -> BaseChoice:
    """Keep or rewrite each of ``spec``'s base files, given ``changed``: the distinct
    keys of the task's change rows (key columns only)."""
    choice = BaseChoice()
    keepable = [f for f in spec.base_files if may_keep(spec, f)]
    replaced = dict(
        zip(
            (f.file_id for f in keepable),
            _replaced_rows(storage, table, keepable, changed),
            strict=True,
        )
    )
    for f in spec.base_files:
        if f.file_id not in replaced:
            choice.rewrite.append(f)
            continue
        hidden = (
            np.empty(0, np.int64)
            if f.deletion_vector is None
            else read_positions(storage, f.deletion_vector, f.record_count)
        )
        hits = _not_in(replaced[f.file_id], hidden)
        if len(hits) == 0:
            choice.kept.append(_kept(f, f.deletion_vector))
            continue
        # Both ascending and unique, and disjoint: one sort of the two makes the union.
        hidden = np.sort(np.concatenate([hidden, hits]), kind="stable")
        if len(hidden) >= spec.vector_ratio * f.record_count:
            choice.rewrite.append(f)
            continue
        path = posixpath.join(spec.output_dir(attempt), f"dv-{f.file_id}.parquet")
        choice.written.append(path)
        choice.kept.append(_kept(f, write_positions(storage, path, hidden)))
    return choice


def may_keep(spec: TaskSpec, f: InputFile) -> bool:
    """Whether ``spec`` may keep base file ``f`` with a vector: vectors on, ``f`` at
    the task's node (not a shallower one, which is re-bucketed), not tiny, and not
    one the planner coalesces (``TaskSpec.rewrite``)."""
    return (
        spec.kind != "minor"
        and f.file_id not in spec.rewrite
        and may_carry_vector(
            spec.vector_ratio, f.node_m, spec.node_m, f.size_bytes, spec.small_file_bytes
        )
    )


def _not_in(positions: Positions, hidden: Positions) -> Positions:
    """``positions`` not in ``hidden``; both ascending and unique (a binary search
    each, where ``np.setdiff1d`` hashes both arrays again)."""
    if len(hidden) == 0 or len(positions) == 0:
        return positions
    at = np.minimum(np.searchsorted(hidden, positions), len(hidden) - 1)
    kept: Positions = positions[hidden[at] != positions]
    return kept


def _replaced_rows(
    storage: Storage, table: TableSchema, files: list[InputFile], changed: pa.Table
) -> list[Positions]:
    """For each of ``files``, the positions of its rows whose key is in ``changed``
    (hidden or not), ascending. One lookup for all the files: a join costs about half
    a millisecond a call whatever its size, most of a small fold's lookups."""
    key = list(table.primary_key)
    keys = [base_keys(storage, table, f) for f in files if f.record_count]
    if changed.num_rows == 0 or not keys:
        return [np.empty(0, np.int64) for _ in files]
    rows = pa.concat_tables(keys, promote_options="permissive")
    if len(key) == 1:
        # One key column: a set lookup, whose hits come out in row order.
        found = pc.is_in(rows.column(0), value_set=changed.column(key[0]))
        hits = np.flatnonzero(found.to_numpy(zero_copy_only=False))
    else:
        positions = pa.array(np.arange(rows.num_rows, dtype=np.int64))
        joined = rows.append_column(POSITION, positions).join(
            changed.select(key), keys=key, join_type="inner"
        )
        hits = np.sort(joined.column(POSITION).to_numpy())
    # Back to each file's own positions (a file of no rows has none).
    counts = [f.record_count for f in files]
    ends = np.cumsum(counts)
    starts = ends - counts
    return [
        hits[lo:hi] - start
        for lo, hi, start in zip(
            np.searchsorted(hits, starts), np.searchsorted(hits, ends), starts, strict=True
        )
    ]


BASE_KEYS: FileCache[pa.Table] = FileCache(64 << 20)
"""Key columns of base files this process looked changes up in: the next fold of the
unit, a few hundred milliseconds later at ten commits a second, reads the same files
(``firn.io.file_cache``)."""


def base_keys(storage: Storage, table: TableSchema, f: InputFile) -> pa.Table:
    """Every row's key columns of base file ``f``, in file order (integrity-checked
    like any read the first time; kept in ``BASE_KEYS``)."""
    keys = BASE_KEYS.get_or_read(
        (storage.full_path(f.path), f.size_bytes, f.record_count),
        lambda: _read_keys(storage, table, f),
        lambda keys: int(keys.nbytes),
    )
    # Cached by path: a key column renamed since is the same column (same types).
    return keys.rename_columns(list(table.primary_key))


def _read_keys(storage: Storage, table: TableSchema, f: InputFile) -> pa.Table:
    written = table.at_version(f.schema_id)  # key columns never change type, only names
    key = list(written.primary_key)
    batches = list(read_batches(storage, f, key, KEY_BATCH_ROWS, written.key_schema))
    if not batches:
        return table.key_schema.empty_table()
    return pa.Table.from_batches(batches).select(key).rename_columns(list(table.primary_key))


def _kept(f: InputFile, vector: DeletionVector | None) -> OutputFile:
    return OutputFile(
        path=f.path,
        file_type=f.file_type,
        node_m=f.node_m,
        node_i=f.node_i,
        seq=f.seq,
        size_bytes=f.size_bytes,
        record_count=f.record_count,
        min_key=f.min_key,
        max_key=f.max_key,
        deletion_vector=vector,
        replaces=f.file_id,
    )
