"""Bulk load: whole rows straight to base files, in key order (no change files, no
major compaction afterwards).

The rows are split by partition and by node of the base write level
(``base.buckets``), each group is sorted by key and written as base files cut at
``target-file-size`` (``firn.engine.writer.SizedWriter``), groups in parallel
threads (numpy and Arrow hash, sort, gather, encode and compress without the GIL).
Each group is sorted as positions, and its key columns come from the sort rather
than from a gather (a table keyed by one integer column sorts its keys packed with
their positions and unpacks them; any other key keeps the sorted key columns its
repeated-key check made); its other columns are gathered in key order one row group
at a time, so gathering the next overlaps encoding the last. What the files are is
exactly what a major compaction would have written for these rows, so readers, the
planner and the kernel need nothing new.

A base file holds at most one row per key (the merge rule's "the base row stands"
has no order between two base rows), so a key that appears twice in a load is
refused with ``ConfigError``: a load is the table's content, not a change set.
Keys are checked in the group's own sort, so the check costs one comparison pass.

This module imports only the model, storage and the writer: it is what a Spark task
of an overwrite runs on an executor (``firn.spark``) as well as ``Table.load``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from firn.engine.writer import ROW_GROUP_ROWS, SizedWriter
from firn.errors import ConfigError
from firn.io.storage import Storage
from firn.model.commits import StagedFile
from firn.model.files import DEFAULT_CODEC
from firn.model.keyhash import hash_keys, node_index
from firn.model.keyorder import integer_order, position_bits, short_bytes_order
from firn.model.merge_on_read import run_starts
from firn.model.schema import TableSchema
from firn.model.tree import ROOT, Node
from firn.model.values import key_at, key_from_json, partition_path, partition_texts

HASH_SLICE_ROWS = 1 << 16
"""Rows per slice of the parallel key hash. A slice's dozen temporary arrays (512 KiB
each) stay in the caches and are reused by the allocator: 20M rows hashed and split
in 0.6 s, against 1.0 s in slices of 1M rows, whose 8 MiB arrays were fresh memory
to fault in each time."""
FEW_CHUNKS = 8
"""Up to this many chunks, a gather finds each chunk's rows by comparisons."""
CHUNK_INDEX_MOST = 1 << 20
"""Most runs a ``ChunkIndex`` keeps an entry for (8 MiB): chunks of very different sizes
(a tiny one among large ones) are found by a binary search instead."""
_ROW = "_firn_row"
_NODE = "_firn_node"


@dataclass(frozen=True)
class LoadGroup:
    """The rows of one partition at one base node, not yet sorted."""

    partition_key: str
    partition_values: dict[str, str]
    node: Node
    positions: npt.NDArray[np.int64] | None
    """Positions in the load's rows, ascending; None when ``packed`` holds them."""
    packed: KeyPositions | None = None
    """For a table keyed by one integer column: the rows as key and position packed
    into one integer each, so one sort orders them (``key_order``). Such a group
    keeps no separate array of positions: at 20M rows that was 160 MB of fresh
    memory joined from the slices for nothing, and each fresh page costs more here
    than the arithmetic that fills it."""

    @property
    def rows(self) -> npt.NDArray[np.int64]:
        """Positions in the load's rows (ascending unless taken from ``packed``)."""
        if self.positions is not None:
            return self.positions
        assert self.packed is not None
        return self.packed.positions()

    def __len__(self) -> int:
        if self.positions is not None:
            return len(self.positions)
        return len(self.packed) if self.packed is not None else 0


@dataclass(frozen=True)
class KeyPositions:
    """Rows of one integer key column as ``(key - low) << bits | position``: ascending
    packed values are the rows in key order. Built where the rows are hashed, slice
    by slice in threads; sorting them then needs no gather of the group's keys and no
    second one of its positions (together three times the sort's time at 5M rows).
    Once sorted, the values are the key column itself in key order too: a slice of
    them unpacks into its keys (``keys``), so the load never gathers the key column
    (a random read of every row: a tenth of a 50M-row load's gather)."""

    values: npt.NDArray[np.uint64]
    bits: int
    """Low bits that hold the position."""
    low: int
    """The smallest key: what the high bits count from."""

    def __len__(self) -> int:
        return len(self.values)

    def positions(self, start: int = 0, stop: int | None = None) -> npt.NDArray[np.int64]:
        """The positions of the values ``[start:stop]``, in the order they are in."""
        return np.bitwise_and(self.values[start:stop], self._mask()).view(np.int64)

    def keys(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """The keys of the values ``[start:stop]``, in the order they are in."""
        keys = np.right_shift(self.values[start:stop], np.uint64(self.bits)).view(np.int64)
        keys += np.int64(self.low)
        return keys

    def ordered(self) -> KeyPositions | None:
        """These values sorted (in place: each fresh array of a 20M-row load's group
        is tens of MB of memory to fault in), or None when a key appears twice.
        Positions are distinct, so the values stay distinct and ``positions()`` still
        holds after a repeat was found."""
        self.values.sort()
        return None if _repeats_key(self.values, self._mask()) else self

    def _mask(self) -> np.uint64:
        return np.uint64((1 << self.bits) - 1)


def _repeats_key(packed: npt.NDArray[np.uint64], position: np.uint64) -> bool:
    """Whether two neighbours of sorted packed values share their key (their bits
    above ``position`` are equal). Compared ``HASH_SLICE_ROWS`` at a time (sized for the
    caches, as the hash's slices are) into two small arrays: compared whole, a 50M-row
    load's groups each made a 100 MB temporary of fresh memory."""
    differs = np.empty(min(HASH_SLICE_ROWS, len(packed)), np.uint64)
    repeats = np.empty(len(differs), np.bool_)
    for start in range(0, len(packed) - 1, HASH_SLICE_ROWS):
        end = min(start + HASH_SLICE_ROWS, len(packed) - 1)
        n = end - start
        np.bitwise_xor(packed[start + 1 : end + 1], packed[start:end], out=differs[:n])
        if np.less_equal(differs[:n], position, out=repeats[:n]).any():
            return True
    return False


def key_packing(table: TableSchema, rows: pa.Table) -> tuple[int, int] | None:
    """``(low, bits)`` to pack ``rows``' keys with their positions (``KeyPositions``),
    or None: more than one key column, not a signed integer, or a span of keys that
    leaves no room for the position in 64 bits."""
    if len(table.primary_key) != 1 or not rows.num_rows:
        return None
    column = rows.column(table.primary_key[0])
    if not pa.types.is_signed_integer(column.type):
        return None
    span = pc.min_max(column)
    low = span["min"].as_py()
    bits = position_bits(rows.num_rows, low, span["max"].as_py())
    return None if bits is None else (low, bits)


def group_rows(table: TableSchema, base_buckets: int, rows: pa.Table) -> list[LoadGroup]:
    """Validated rows (``validate_rows``) split by partition and base node."""
    if table.keyed and base_buckets == 1:
        m, nodes = 1, np.zeros(rows.num_rows, dtype=np.int64)  # one node: no hashing
    elif table.keyed and not table.partition_by:
        m = base_buckets
        parts = _node_parts(table, rows, m, key_packing(table, rows))
        groups = [
            LoadGroup("", {}, Node(m, i), positions, packed)
            for i, (positions, packed) in enumerate(parts)
        ]
        return [g for g in groups if len(g)]
    elif table.keyed:
        m = base_buckets
        nodes = node_index(key_hashes(table, rows), m)
    else:
        m, nodes = 1, np.zeros(rows.num_rows, dtype=np.int64)
    if not table.partition_by:
        return [
            LoadGroup("", {}, Node(m, i) if table.keyed else ROOT, positions)
            for i, positions in enumerate(_node_positions(nodes, m))
            if len(positions)
        ]
    tagged = rows.select(list(table.partition_by))
    tagged = tagged.append_column(_NODE, pa.array(nodes, pa.int64()))
    tagged = tagged.append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    groups = tagged.group_by([*table.partition_by, _NODE], use_threads=False).aggregate(
        [(_ROW, "list")]
    )
    texts = partition_texts(groups.select(list(table.partition_by)))
    out = []
    for g in range(groups.num_rows):
        node = int(groups.column(_NODE)[g].as_py())
        positions = groups.column(f"{_ROW}_list")[g].values.to_numpy()
        out.append(
            LoadGroup(
                partition_path(table.partition_by, texts[g]),
                dict(zip(table.partition_by, texts[g], strict=True)),
                Node(m, node) if table.keyed else ROOT,
                positions,
            )
        )
    return out


def _node_positions(nodes: npt.NDArray[np.int64], m: int) -> list[npt.NDArray[np.int64]]:
    """The positions of each node's rows, ascending: one stable counting-style sort of
    small node numbers splits them."""
    order = np.argsort(nodes.astype(np.int16 if m <= 1 << 15 else np.int64), kind="stable")
    bounds = np.searchsorted(nodes[order], np.arange(m + 1))
    return [order[lo:hi] for lo, hi in itertools.pairwise(bounds)]


def _hashed_groups(
    table: TableSchema, rows: pa.Table, m: int, slice_rows: int = HASH_SLICE_ROWS
) -> list[npt.NDArray[np.int64]]:
    """The positions of each node's rows at level ``m``, ascending."""
    parts = _node_parts(table, rows, m, None, slice_rows)
    return [positions for positions, _ in parts if positions is not None]


def _node_parts(
    table: TableSchema,
    rows: pa.Table,
    m: int,
    packing: tuple[int, int] | None,
    slice_rows: int = HASH_SLICE_ROWS,
) -> list[tuple[npt.NDArray[np.int64] | None, KeyPositions | None]]:
    """The positions of each node's rows at level ``m``, ascending, or with
    ``packing`` (``key_packing``) the same rows packed with their keys instead. Each slice of
    rows is hashed, split by node (and packed) in a thread of its own, the slices'
    parts then joined per node. Split after hashing, on one thread, the split held
    the other cores idle for a fifth of a 20M-row load."""
    keys = rows.select(list(table.primary_key))

    def split(start: int) -> list[npt.NDArray[np.int64] | npt.NDArray[np.uint64]]:
        some = keys.slice(start, slice_rows)
        parts = _node_positions(node_index(hash_keys(some.columns), m), m)
        if packing is None:
            return [part + start for part in parts]
        low, bits = packing
        ints = np.asarray(some.column(0).to_numpy(), dtype=np.int64)
        packed = (ints - np.int64(low)).view(np.uint64) << np.uint64(bits)
        packed |= np.arange(start, start + len(ints), dtype=np.uint64)
        return [packed[part] for part in parts]

    starts = range(0, rows.num_rows, slice_rows)
    if len(starts) <= 1:
        sliced = [split(0)]
    else:
        with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1), "firn-hash") as pool:
            sliced = list(pool.map(split, starts))
    joined = [np.concatenate([s[i] for s in sliced]) for i in range(m)]
    if packing is None:
        return [(part.view(np.int64), None) for part in joined]
    low, bits = packing
    return [(None, KeyPositions(part.view(np.uint64), bits, low)) for part in joined]


def key_hashes(
    table: TableSchema, rows: pa.Table, slice_rows: int = HASH_SLICE_ROWS
) -> npt.NDArray[np.uint64]:
    """The key hash of every row, slices hashed in parallel threads (numpy releases
    the GIL in its array arithmetic; the hash of a row depends on that row alone)."""
    keys = rows.select(list(table.primary_key))
    if rows.num_rows <= slice_rows:
        return hash_keys(keys.columns)
    starts = range(0, rows.num_rows, slice_rows)
    threads = min(len(starts), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="firn-hash") as pool:
        parts = pool.map(lambda start: hash_keys(keys.slice(start, slice_rows).columns), starts)
        return np.concatenate(list(parts))


@dataclass(frozen=True)
class KeyOrder:
    """A group's rows in key order, taken a slice at a time (``take``). The sort
    leaves the key columns in this order too (packed with the positions, or sorted
    for the repeated-key check), so a slice takes them from here and gathers only the
    other columns: a random read of every row, and for string keys of their bytes,
    less."""

    positions: npt.NDArray[np.int64] | None
    """The rows' positions in key order; None when ``packed`` holds them."""
    packed: KeyPositions | None = None
    """The rows' keys and positions, sorted: a slice's key column is unpacked from
    them."""
    key: str = ""
    """The key column ``packed`` holds."""
    keys: pa.Table | None = None
    """The key columns in this order, as the sort left them (when not ``packed``)."""

    def __len__(self) -> int:
        if self.packed is not None:
            return len(self.packed)
        assert self.positions is not None
        return len(self.positions)

    def rows(self, start: int, stop: int | None) -> npt.NDArray[np.int64]:
        """The positions of the rows ``[start:stop]`` of this order."""
        if self.packed is not None:
            return self.packed.positions(start, stop)
        assert self.positions is not None
        return self.positions[start:stop]

    def take(self, source: Gather, start: int, stop: int) -> pa.Table:
        """The rows ``[start:stop]`` of this order, from ``source`` (the load's rows)."""
        positions = self.rows(start, stop)
        if self.packed is not None:
            key_type = source.rows.schema.field(self.key).type
            keys = _integer_column(self.packed.keys(start, stop), key_type)
            return source.take(positions, {self.key: keys})
        if self.keys is not None:
            part = self.keys.slice(start, len(positions))
            return source.take(positions, dict(zip(part.column_names, part.columns, strict=True)))
        return source.take(positions)


def key_order(table: TableSchema, key_rows: Gather, group: LoadGroup) -> KeyOrder:
    """The group's rows among the load's rows (``key_rows``: their key columns), in
    key order; ``ConfigError`` naming a key that appears twice (checked on the sorted
    keys: one neighbour comparison)."""
    if not table.keyed:
        return KeyOrder(group.rows)
    if group.packed is not None:
        in_order = group.packed.ordered()
        if in_order is not None:
            return KeyOrder(None, in_order, table.primary_key[0])
        # A repeated key: the general path below finds and names it.
    key = list(table.primary_key)
    keys = key_rows.take(group.rows).select(key)
    if len(key) == 1 and pa.types.is_integer(keys.schema.field(0).type):
        # One integer key: numpy's sort is faster than a general table sort.
        values = keys.column(0).to_numpy()
        order = np.argsort(values) if values.dtype == np.uint64 else integer_order(values)
        ordered = values[order]
        if len(ordered) > 1 and bool(np.any(ordered[1:] == ordered[:-1])):
            sorted_keys = keys.take(pa.array(order))
            raise duplicate_error(table, sorted_keys, run_starts(sorted_keys))
        in_order = _integer_column(ordered, keys.schema.field(0).type)
        return KeyOrder(
            group.rows[order], keys=pa.Table.from_arrays([in_order], schema=keys.schema)
        )
    column = keys.column(0)
    # One short string or binary key: sorted as words by numpy, in Arrow's order.
    short = short_bytes_order(column.chunk(0)) if len(key) == 1 and column.num_chunks == 1 else None
    if short is not None:
        indices = pa.array(short)
    else:
        indices = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in key])
    sorted_keys = keys.take(indices)
    starts = run_starts(sorted_keys)
    if len(starts) != sorted_keys.num_rows:
        raise duplicate_error(table, sorted_keys, starts)
    return KeyOrder(group.rows[indices.to_numpy()], keys=sorted_keys)


def sorted_group(table: TableSchema, rows: pa.Table, group: LoadGroup) -> pa.Table:
    """The group's rows in key order; ``ConfigError`` naming a key that appears twice."""
    source = Gather(rows)
    order = key_order(table, source.select(table.primary_key), group)
    return order.take(source, 0, len(order))


LOAD_RULE = (
    "a bulk load takes at most one row per key: keep one row per key, or commit the "
    "rows as a change set (Table.commit applies them in order)"
)


def duplicate_error(
    table: TableSchema, sorted_keys: pa.Table, starts: pa.Array, rule: str = LOAD_RULE
) -> ConfigError:
    """The error for key-sorted rows whose runs (``run_starts``) are not all single."""
    run_ends = np.append(starts.to_numpy()[1:], sorted_keys.num_rows)
    first = int(starts.to_numpy()[np.flatnonzero(run_ends - starts.to_numpy() > 1)[0]])
    duplicates = sorted_keys.num_rows - len(starts)
    return ConfigError(
        f"key {key_at(sorted_keys, table.primary_key, first)} appears more than once "
        f"({duplicates} extra row(s) in all); {rule}"
    )


def write_groups(
    table: TableSchema,
    storage: Storage,
    directory: str,
    rows: pa.Table,
    groups: Sequence[LoadGroup],
    target_file_size: int,
    *,
    threads: int | None = None,
    compression: str = DEFAULT_CODEC,
) -> list[StagedFile]:
    """Sort and write every group as base files under ``directory`` (relative to the
    table's location; one sub-directory per partition). On an error the files
    written so far are deleted, and the error is raised."""

    source = Gather(rows)
    keys = source.select(table.primary_key) if table.keyed else source

    def write(group: LoadGroup) -> list[StagedFile]:
        order = key_order(table, keys, group)
        return write_sorted(
            table, storage, directory, group, source, order, target_file_size, compression
        )

    return _parallel(write, groups, threads)


class Gather:
    """Takes rows of a table by position, whatever its chunks.

    Arrow's take on a column of several chunks resolves each position's chunk again
    for every column (three times the cost of a take from one chunk). Joining the
    chunks once instead (what loads did until 2026-11-29) copies the whole load and
    holds the copy to the end: 1 GB more at 20M rows (peak 2.96 GB against 1.79),
    most of its time spent faulting in fresh memory. So positions are resolved to
    their chunk once per take, and each column is taken chunk by chunk, then put in
    order by one more take of those pieces: by numpy for a fixed-width column
    without nulls (its pieces taken into one array), by Arrow for any other. (numpy's
    take puts 1M values in order in a third of the time an assignment to their
    places takes: a 50M-row load in five chunks, 5 ns a row against 17.) A table of
    one chunk is taken as it is."""

    def __init__(self, rows: pa.Table) -> None:
        self.rows = rows
        self._batches = rows.to_batches()  # each column's chunks cut at the same rows
        sizes = [b.num_rows for b in self._batches]
        self._starts = np.cumsum([0, *sizes], dtype=np.int64)
        self._direct = [
            None if any(b.column(j).null_count for b in self._batches) else _numpy_width(f.type)
            for j, f in enumerate(rows.schema)
        ]
        self._index: ChunkIndex | None = None  # made at the first take that needs it

    def select(self, columns: Sequence[str]) -> Gather:
        """The same rows, only ``columns``."""
        return Gather(self.rows.select(list(columns)))

    def take(
        self,
        positions: npt.NDArray[np.int64],
        given: Mapping[str, pa.Array | pa.ChunkedArray] | None = None,
    ) -> pa.Table:
        """The rows at ``positions``, in that order. The columns ``given`` are not
        taken: they hold those rows already, in that order, and are used as they are."""
        if not given:
            return self._take(positions, frozenset())
        taken = self._take(positions, frozenset(given))
        columns = [
            given[f.name] if f.name in given else taken.column(f.name) for f in self.rows.schema
        ]
        return pa.Table.from_arrays(columns, schema=self.rows.schema)

    def _take(self, positions: npt.NDArray[np.int64], skip: frozenset[str]) -> pa.Table:
        """The rows at ``positions``, in that order, but for the columns ``skip``."""
        if len(self._batches) <= 1 or not len(positions):
            rows = self.rows.drop_columns(list(skip)) if skip else self.rows
            return rows.take(pa.array(positions, pa.int64()))
        order, bounds = self._by_chunk(positions)
        pieces = [  # (chunk, its rows' span in ``order``, their positions in the chunk)
            (c, lo, hi, positions[order[lo:hi]] - self._starts[c])
            for c, (lo, hi) in enumerate(itertools.pairwise(bounds))
            if hi > lo
        ]
        if len(pieces) == 1:
            c, _, _, local = pieces[0]
            batch = self._batches[c].drop_columns(list(skip)) if skip else self._batches[c]
            return pa.Table.from_batches([batch.take(pa.array(local))])
        # Where each row taken chunk by chunk (in ``order``) goes in the answer.
        inverse = np.empty(len(positions), np.int64)
        inverse[order] = np.arange(len(positions), dtype=np.int64)
        in_order = pa.array(inverse)  # no copy: int64 without nulls
        columns, fields = [], []
        for j, width in enumerate(self._direct):
            field = self.rows.schema.field(j)
            if field.name in skip:
                continue
            fields.append(field)
            if width is not None:
                by_chunk = np.empty(len(positions), np.dtype(f"u{width}"))
                for c, lo, hi, local in pieces:
                    values = _fixed_values(self._batches[c].column(j), width)
                    # Local positions lie in their chunk, so "clip" never clips; any
                    # mode but "raise" takes straight into ``out`` (with "raise" numpy
                    # takes into a buffer, then copies): a quarter less time.
                    np.take(values, local, out=by_chunk[lo:hi], mode="clip")
                out = np.take(by_chunk, inverse)
                columns.append(
                    pa.Array.from_buffers(field.type, len(out), [None, pa.py_buffer(out)])
                )
                continue
            taken = [self._batches[c].column(j).take(pa.array(local)) for c, _, _, local in pieces]
            columns.append(pa.concat_arrays(taken).take(in_order))
        return pa.Table.from_arrays(columns, schema=pa.schema(fields, self.rows.schema.metadata))

    def _by_chunk(
        self, positions: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Indexes into ``positions`` grouped by chunk (ascending within each), and
        where each chunk's group begins and ends (``len(chunks) + 1`` bounds). A few
        chunks (a big table's) are found by comparisons, a pass each; many (a Spark
        task's batches) by one search and one stable sort of the chunk numbers."""
        starts = self._starts
        if len(self._batches) <= FEW_CHUNKS:
            wheres = [
                np.flatnonzero((positions >= lo) & (positions < hi))
                for lo, hi in itertools.pairwise(starts)
            ]
            bounds = np.cumsum([0, *(len(where) for where in wheres)])
            return np.concatenate(wheres), bounds
        if self._index is None:
            self._index = ChunkIndex(starts)
        chunk = self._index.of(positions)
        # A stable sort of 16-bit numbers is a radix sort: 8 ns a row, 50 for 32-bit ones.
        small = chunk.astype(np.int16) if len(self._batches) < 1 << 15 else chunk
        bounds = np.zeros(len(starts), np.int64)
        np.cumsum(np.bincount(chunk, minlength=len(self._batches)), out=bounds[1:])
        return np.argsort(small, kind="stable"), bounds


class ChunkIndex:
    """Which chunk of a table each row position is in.

    numpy's binary search (``searchsorted``) of random positions among 50 chunk starts
    costs 35 ns a position: a 50M-row load handed in 1M-row chunks (a Parquet file's row
    groups) spent more time finding chunks than taking rows. Instead a table gives the
    chunk each run of ``2**shift`` positions begins in. No run is longer than any chunk
    but the last, so a run meets at most two chunks, and one comparison with the end of
    the first settles a position: about 5 ns. Empty chunks hold no position and are left
    out of the table."""

    def __init__(self, starts: npt.NDArray[np.int64]) -> None:
        sizes = np.diff(starts)
        self._chunks = np.flatnonzero(sizes)
        """The non-empty chunks' numbers."""
        self._starts = starts[:-1][self._chunks]
        self._ends = self._starts + sizes[self._chunks]
        shortest = int(sizes[self._chunks][:-1].min()) if len(self._chunks) > 1 else 1
        self._shift = shortest.bit_length() - 1  # 2**shift <= shortest
        runs = (int(starts[-1]) >> self._shift) + 1
        self._first: npt.NDArray[np.int64] | None = None
        if runs <= CHUNK_INDEX_MOST:
            run_starts = np.arange(runs, dtype=np.int64) << self._shift
            self._first = np.searchsorted(self._starts, run_starts, side="right") - 1
        self._renumber = len(self._chunks) < len(sizes)

    def of(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The chunk number of every position (each within the table's rows)."""
        if self._first is None:
            live = np.searchsorted(self._starts, positions, side="right") - 1
        else:
            live = self._first[positions >> self._shift]
            live += positions >= self._ends[live]
        return self._chunks[live] if self._renumber else live


def _numpy_width(data_type: pa.DataType) -> int | None:
    """Bytes per value of a type whose values numpy can move as plain integers
    (integers, floats, dates, times, timestamps, durations), or None."""
    if not (
        pa.types.is_integer(data_type)
        or pa.types.is_floating(data_type)
        or pa.types.is_temporal(data_type)
    ):
        return None
    width = int(data_type.bit_width // 8)
    return width if width in (1, 2, 4, 8) else None  # not month_day_nano intervals


def _integer_column(values: npt.NDArray[np.int64], data_type: pa.DataType) -> pa.Array:
    """Integers as a column of ``data_type`` (an integer type holding every value)."""
    own = np.ascontiguousarray(values.astype(data_type.to_pandas_dtype(), copy=False))
    return pa.Array.from_buffers(data_type, len(own), [None, pa.py_buffer(own)])


def _fixed_values(column: pa.Array, width: int) -> npt.NDArray[Any]:
    """A fixed-width column's values as unsigned integers, without a copy."""
    values = np.frombuffer(column.buffers()[1], dtype=np.dtype(f"u{width}"))
    return values[column.offset : column.offset + len(column)]


def write_sorted(
    table: TableSchema,
    storage: Storage,
    directory: str,
    group: LoadGroup,
    rows: Gather,
    order: KeyOrder,
    target_file_size: int,
    compression: str = DEFAULT_CODEC,
) -> list[StagedFile]:
    """Write the group's rows (``order``: in key order) as base files cut at the
    target size. Rows are gathered one row group at a time: gathering the next
    overlaps the writer's encoding of the previous (``SizedWriter`` encodes in a
    thread of its own), and no sorted copy of the whole group is ever held."""
    where = f"{directory}/{group.partition_key}" if group.partition_key else directory
    writer = SizedWriter(
        storage,
        where,
        schema=table.schema,
        node=group.node,
        seq=0,  # the seq is the load's, allocated when it is registered
        target_size=target_file_size,
        key_columns=table.primary_key,
        compression=compression,
    )
    try:
        for start in range(0, len(order), ROW_GROUP_ROWS):
            writer.write(order.take(rows, start, start + ROW_GROUP_ROWS))
        outputs = writer.close()
    except BaseException:
        writer.abort()
        raise
    return [
        StagedFile(
            partition_key=group.partition_key,
            partition_values=group.partition_values,
            file_type="B",
            node=group.node,
            path=o.path,
            size_bytes=o.size_bytes,
            record_count=o.record_count,
            min_key=o.min_key,
            max_key=o.max_key,
            schema_id=table.schema_id,
        )
        for o in outputs
    ]


def _parallel(
    work: Callable[[LoadGroup], list[StagedFile]],
    groups: Sequence[LoadGroup],
    threads: int | None,
) -> list[StagedFile]:
    threads = max(1, min(len(groups), threads or os.cpu_count() or 1))
    if threads == 1:
        return [f for g in groups for f in work(g)]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="firn-load") as pool:
        futures = [pool.submit(work, g) for g in groups]
        results = [f.exception() or f.result() for f in futures]
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    return [f for r in results if not isinstance(r, BaseException) for f in r]


def duplicate_across(
    table: TableSchema,
    storage: Storage,
    files: Iterable[StagedFile],
    extra_columns: Sequence[str] = (),
    rule: str = LOAD_RULE,
) -> ConfigError | None:
    """Files written by independent workers (Spark tasks) may share a key: read the
    key columns (and ``extra_columns``) of files that share a partition and node,
    and return the error naming a repeated one, or None. Files alone in their
    partition and node were checked when written."""
    by_place: dict[tuple[str, Node], list[StagedFile]] = {}
    for f in files:
        by_place.setdefault((f.partition_key, f.node), []).append(f)
    columns = [*table.primary_key, *extra_columns]
    for place_files in by_place.values():
        if len(place_files) < 2 or not _ranges_overlap(table, place_files):
            continue
        keys = pa.concat_tables(
            [storage.read_parquet(f.path, columns=columns) for f in place_files]
        ).combine_chunks()
        order = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in columns])
        sorted_keys = keys.take(order)
        starts = run_starts(sorted_keys)
        if len(starts) != sorted_keys.num_rows:
            return duplicate_error(table, sorted_keys, starts, rule)
    return None


def _ranges_overlap(table: TableSchema, files: Sequence[StagedFile]) -> bool:
    """Whether any two files' key ranges intersect (else they share no key)."""
    ranges: list[tuple[Any, Any]] = sorted(
        (key_from_json(f.min_key, table.key_schema), key_from_json(f.max_key, table.key_schema))
        for f in files
        if f.min_key is not None and f.max_key is not None
    )
    return any(lo <= hi for (_, hi), (lo, _) in itertools.pairwise(ranges))
