"""Deletion vectors: the rows of a base file that later compactions hid without
rewriting the file (Paimon's and Iceberg v3's deletion vectors, Doris's delete bitmap).

A compaction that updates or deletes a few keys of a large base file need not
rewrite it: it writes the keys' new rows to a new base file and records, for the old
one, the positions of the rows they replace. A read of the base file then skips those
rows, so every key still has one live base row.

On storage a deletion vector is a Parquet file with one column, ``pos`` (int64): the
0-based positions, in file order, of the hidden rows, ascending and unique. The
catalog records it on the base file's row (``data_file.dv_path``, ``dv_size_bytes``,
``dv_rows``); giving a base file a new vector is a new catalog row for the same data
file, so each snapshot reads the vector it had. A vector replaces the previous one
whole: it holds every hidden position, not only the new ones.

Integrity, as for data files (``firn.io.integrity``): a vector's size must be what
the catalog recorded, and its positions must number ``rows``, be ascending and
unique, and lie inside the base file; otherwise ``CorruptFileError`` naming the
vector, since a wrong vector would hide or resurrect rows without any error.

Executor-safe: pyarrow and numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from firn.errors import CorruptFileError
from firn.io.file_cache import FileCache
from firn.io.integrity import RECORD_COUNT, Span, read_batches
from firn.io.storage import Storage
from firn.model.files import DeletionVector

POSITION = "pos"
SCHEMA = pa.schema([pa.field(POSITION, pa.int64(), nullable=False)])
Positions = npt.NDArray[np.int64]


VECTORS: FileCache[Positions] = FileCache(16 << 20)
"""Vectors this process read, for the next fold or scan of the same base file
(``firn.io.file_cache``); callers must not modify the arrays."""


def read_positions(
    storage: Storage, vector: DeletionVector, base_rows: int, *, cached: bool = True
) -> Positions:
    """The positions ``vector`` hides in a base file of ``base_rows`` rows, checked
    (see the module doc); read-only, possibly shared with other callers. ``cached``
    False reads storage even if this process read the vector before (a verify)."""
    if not cached:
        return _read_positions(storage, vector, base_rows)
    key = (storage.full_path(vector.path), vector.size_bytes, vector.rows, base_rows)
    return VECTORS.get_or_read(
        key, lambda: _read_positions(storage, vector, base_rows), lambda p: int(p.nbytes)
    )


def _read_positions(storage: Storage, vector: DeletionVector, base_rows: int) -> Positions:
    parts = [
        batch.column(0).to_numpy(zero_copy_only=False)
        for batch in read_batches(storage, vector, [POSITION], 1 << 20, SCHEMA)
    ]
    positions = np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
    problem = _problem(positions, base_rows)
    if problem:
        raise CorruptFileError(storage.full_path(vector.path), RECORD_COUNT, problem)
    positions.setflags(write=False)  # shared through VECTORS
    return positions


def _problem(positions: Positions, base_rows: int) -> str | None:
    if len(positions) and (positions[0] < 0 or positions[-1] >= base_rows):
        return f"names a position outside the base file's {base_rows} rows"
    if not _ascending_unique(positions):
        return "positions are not ascending and unique"
    return None


def _ascending_unique(positions: Positions) -> bool:
    return len(positions) < 2 or bool(np.all(positions[1:] > positions[:-1]))


def write_positions(
    storage: Storage, path: str, positions: Iterable[int] | Positions
) -> DeletionVector:
    """Write a vector hiding ``positions`` (any order; repeats are one) at ``path``."""
    given = np.asarray(positions if isinstance(positions, np.ndarray) else list(positions))
    given = given.astype(np.int64, copy=False)
    unique = given if _ascending_unique(given) else np.unique(given)
    table = pa.table([pa.array(unique, pa.int64())], schema=SCHEMA)
    # Ascending positions delta-encode to under a byte each where zstd over plain or
    # dictionary pages takes about three (a vector is rewritten whole at every fold
    # that adds to it, so its size is write amplification).
    size = storage.write_parquet(path, table, {POSITION: "DELTA_BINARY_PACKED"})
    return DeletionVector(path, size, len(unique))


def live_rows(rows: pa.Table, hidden: Positions) -> pa.Table:
    """``rows`` (a base file's rows, whole and in file order) without the rows at
    ``hidden`` positions."""
    if not len(hidden):
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[hidden] = False
    return rows.filter(pa.array(keep))


def live_matching(
    rows: pa.Table,
    hidden: Positions,
    spans: Sequence[Span],
    row_filter: pc.Expression,
) -> pa.Table:
    """The rows ``row_filter`` keeps of ``rows`` (a base file's row groups whose
    ``spans``, first row and rows, are given, in file order), without those at
    ``hidden`` positions. The filter goes first, with each row's position beside it,
    and the vector is then matched to what it kept: a lookup keeps a row or two of a
    row group, and masking the group's rows first copied all of them twice."""
    ranges = [np.arange(first, first + n, dtype=np.int64) for first, n in spans]
    positions = np.concatenate(ranges) if ranges else np.empty(0, np.int64)
    tagged = rows.append_column(_POSITION, pa.array(positions, pa.int64()))
    kept = tagged.filter(row_filter)
    at = kept.column(_POSITION).to_numpy()
    kept = kept.drop_columns([_POSITION])
    if not len(hidden) or not len(at):
        return kept
    found = np.minimum(np.searchsorted(hidden, at), len(hidden) - 1)
    live = hidden[found] != at
    return kept if bool(live.all()) else kept.filter(pa.array(live))


_POSITION = "_firn_position"
"""A column no table may have (``_firn`` names are reserved): a row's position."""


def live_batches(batches: Iterable[pa.RecordBatch], hidden: Positions) -> Iterator[pa.RecordBatch]:
    """``batches`` (a base file's rows in file order, unfiltered) without the rows at
    ``hidden`` positions."""
    offset = 0
    for batch in batches:
        n = batch.num_rows
        lo, hi = np.searchsorted(hidden, [offset, offset + n])
        if lo == hi:
            yield batch
        else:
            keep = np.ones(n, dtype=bool)
            keep[hidden[lo:hi] - offset] = False
            yield batch.filter(pa.array(keep))
        offset += n
