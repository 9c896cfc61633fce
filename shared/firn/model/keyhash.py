"""FirnHash64: the stable, vectorised primary-key hash behind the hash tree.

The hash decides which tree node a key belongs to, so it is part of the on-disk
format: every process, machine and library version must compute the same value, and
the pinned vectors in ``tests/unit/test_keyhash_vectors.py`` fail if it ever changes.
It is defined here in plain integer arithmetic on unsigned 64-bit words (numpy,
wrapping), never on a library's internal hash.

Algorithm (all arithmetic mod 2**64, ``fmix`` is MurmurHash3's 64-bit finaliser)::

    fmix(h)   = h ^= h >> 33; h *= 0xFF51AFD7ED558CCD; h ^= h >> 33;
                h *= 0xC4CEB9FE1A85EC53; h ^= h >> 33
    absorb(h, w) = rotl(h ^ (w * P1), 31) * P2          P1, P2 below

A value becomes a list of 64-bit *lanes*, by its Arrow type:

    signed and unsigned integers   [the value as a two's-complement int64]
    date32 / date64                [days since 1970-01-01]
    timestamp (any unit, any tz)   [microseconds since the epoch, UTC, floored]
    decimal128                     [low 64 bits, high 64 bits of the unscaled value]
    string / binary (and large_)   [byte length, then the bytes as little-endian
                                    8-byte words, the last one zero-padded]

    column_hash = fmix(absorb(...absorb(absorb(SEED ^ TAG, lane0), lane1)..., laneN)
                       ^ number_of_lanes)

TAG separates the lane families (integers and dates and timestamps share one tag, so
widening int32 to int64 keeps every key in its node). A composite key folds its
columns in key order::

    key_hash = fmix(column_hash_1);  key_hash = fmix(key_hash * P3 + column_hash_k)

and a key belongs to node ``(m, i)`` with ``i = key_hash mod m`` (m a power of two,
so the low bits, which fmix mixes fully).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from firn.errors import ConfigError

U64 = npt.NDArray[np.uint64]

SEED = np.uint64(0x9E3779B97F4A7C15)
P1 = np.uint64(0x87C37B91114253D5)
P2 = np.uint64(0x4CF5AD432745937F)
P3 = np.uint64(0x9FB21C651E98DF25)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)

TAG_INTEGER = np.uint64(1)
TAG_DECIMAL = np.uint64(2)
TAG_BYTES = np.uint64(3)


def fmix(h: U64) -> U64:
    return _fmix_in_place(h.copy())


def _fmix_in_place(h: U64) -> U64:
    # One scratch array: a key column of millions of rows would otherwise allocate
    # (and page-fault) a fresh array per step, which costs more than the arithmetic.
    scratch = np.empty_like(h)
    _xorshift33(h, scratch)
    np.multiply(h, _F1, out=h)
    _xorshift33(h, scratch)
    np.multiply(h, _F2, out=h)
    _xorshift33(h, scratch)
    return h


def _xorshift33(h: U64, scratch: U64) -> None:
    """``h ^= h >> 33`` in place."""
    np.right_shift(h, np.uint64(33), out=scratch)
    np.bitwise_xor(h, scratch, out=h)


def absorb(h: U64, lane: U64) -> U64:
    x = lane * P1
    np.bitwise_xor(x, h, out=x)
    scratch = x >> np.uint64(33)
    np.left_shift(x, np.uint64(31), out=x)
    np.bitwise_or(x, scratch, out=x)
    np.multiply(x, P2, out=x)
    return x


def _finish(h: U64, lanes: U64 | np.uint64) -> U64:
    return _fmix_in_place(h ^ lanes)


def _as_u64(values: npt.NDArray[np.int64]) -> U64:
    return values.view(np.uint64)


def _int_lanes(column: pa.Array) -> U64:
    t = column.type
    if pa.types.is_timestamp(t):
        # Arrow stores timestamps as UTC counts of their unit, whatever the time zone.
        counts = column.view(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64)
        scale = {"s": 1_000_000, "ms": 1_000, "us": 1}
        if t.unit == "ns":
            return _as_u64(np.floor_divide(counts, 1_000))
        return _as_u64(counts * scale[t.unit])
    if pa.types.is_date32(t):
        return _as_u64(column.cast(pa.int32()).to_numpy(zero_copy_only=False).astype(np.int64))
    if pa.types.is_date64(t):
        millis = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
        return _as_u64(np.floor_divide(millis, 86_400_000).astype(np.int64))
    if pa.types.is_unsigned_integer(t):
        unsigned: U64 = column.to_numpy(zero_copy_only=False).astype(np.uint64)
        return unsigned
    return _as_u64(column.to_numpy(zero_copy_only=False).astype(np.int64))


def _hash_integers(column: pa.Array) -> U64:
    lanes = _int_lanes(column)
    h = np.full(len(lanes), SEED ^ TAG_INTEGER, dtype=np.uint64)
    return _finish(absorb(h, lanes), np.uint64(1))


def _hash_decimals(column: pa.Array) -> U64:
    if not pa.types.is_decimal128(column.type):
        raise ConfigError(f"key type {column.type} is not supported (decimal128 only)")
    # Each decimal128 value is 16 little-endian bytes: the unscaled two's-complement value.
    raw = np.frombuffer(column.buffers()[1], dtype=np.uint64)
    words = raw[2 * column.offset : 2 * (column.offset + len(column))].reshape(-1, 2)
    h = np.full(len(column), SEED ^ TAG_DECIMAL, dtype=np.uint64)
    h = absorb(absorb(h, words[:, 0].copy()), words[:, 1].copy())
    return _finish(h, np.uint64(2))


def _hash_bytes(column: pa.Array) -> U64:
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    n = len(column)
    offsets_dtype = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    offsets = np.frombuffer(column.buffers()[1], dtype=offsets_dtype)[
        column.offset : column.offset + n + 1
    ].astype(np.int64)
    data_buffer = column.buffers()[2]
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)
        if data_buffer is not None
        else np.empty(0, np.uint8)
    )
    # Pad so that an 8-byte load at any string start stays inside the array, then view
    # every byte position as the start of a little-endian uint64 (unaligned, strided).
    padded = np.zeros(len(data) + 8, dtype=np.uint8)
    padded[: len(data)] = data
    windows = np.ndarray(
        shape=(len(data) + 1,), dtype="<u8", buffer=padded.data, offset=0, strides=(1,)
    )
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    h = np.full(n, SEED ^ TAG_BYTES, dtype=np.uint64)
    h = absorb(h, lengths.astype(np.uint64))
    words = (lengths + 7) // 8
    for k in range(int(words.max()) if n else 0):
        active = words > k
        idx = np.nonzero(active)[0] if not active.all() else None
        pos = starts + 8 * k if idx is None else starts[idx] + 8 * k
        word = windows[pos].astype(np.uint64)
        remaining = (lengths if idx is None else lengths[idx]) - 8 * k
        short = remaining < 8
        if short.any():
            keep = (
                np.uint64(1) << (remaining[short].astype(np.uint64) * np.uint64(8))
            ) - np.uint64(1)
            word[short] &= keep
        if idx is None:
            h = absorb(h, word)
        else:
            h[idx] = absorb(h[idx], word)
    return _finish(h, (words + 1).astype(np.uint64))


def hash_column(column: pa.Array | pa.ChunkedArray) -> U64:
    """The FirnHash64 of every value of one key column (no nulls allowed)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        raise ConfigError("key columns must not contain nulls")
    t = column.type
    if pa.types.is_integer(t) or (
        pa.types.is_temporal(t) and not pa.types.is_time(t) and not pa.types.is_duration(t)
    ):
        return _hash_integers(column)
    if pa.types.is_decimal(t):
        return _hash_decimals(column)
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return _hash_bytes(column)
    raise ConfigError(f"key type {t} is not supported by the key hash")


def hash_keys(columns: Sequence[pa.Array | pa.ChunkedArray]) -> U64:
    """FirnHash64 of composite keys given as their columns, in primary-key order."""
    if not columns:
        raise ConfigError("a key needs at least one column")
    h = _fmix_in_place(hash_column(columns[0]))
    for column in columns[1:]:
        h = h * P3
        h += hash_column(column)
        h = _fmix_in_place(h)
    return h


def node_index(hashes: U64, m: int) -> npt.NDArray[np.int64]:
    """The node ``i`` at level ``m`` (a power of two) of every hash."""
    if m <= 0 or m & (m - 1):
        raise ConfigError(f"tree level must be a power of two, got {m}")
    return (hashes & np.uint64(m - 1)).astype(np.int64)
