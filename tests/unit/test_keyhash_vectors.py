"""FirnHash64 must never change: pinned vectors, and a scalar reference implementation
written straight from the algorithm in ``firn.model.keyhash``'s docstring."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from firn.errors import ConfigError
from firn.model.keyhash import hash_keys, node_index

MASK = 2**64 - 1
SEED, P1, P2, P3 = 0x9E3779B97F4A7C15, 0x87C37B91114253D5, 0x4CF5AD432745937F, 0x9FB21C651E98DF25


def ref_fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    return h ^ (h >> 33)


def ref_absorb(h: int, lane: int) -> int:
    x = h ^ ((lane * P1) & MASK)
    x = ((x << 31) | (x >> 33)) & MASK
    return (x * P2) & MASK


def ref_column(tag: int, lanes: list[int]) -> int:
    h = SEED ^ tag
    for lane in lanes:
        h = ref_absorb(h, lane & MASK)
    return ref_fmix(h ^ len(lanes))


def ref_bytes(value: bytes) -> int:
    padded = value + b"\0" * (-len(value) % 8)
    words = [struct.unpack_from("<Q", padded, i)[0] for i in range(0, len(padded), 8)]
    return ref_column(3, [len(value), *words])


def ref_key(column_hashes: list[int]) -> int:
    h = ref_fmix(column_hashes[0])
    for c in column_hashes[1:]:
        h = ref_fmix(((h * P3) & MASK) + c & MASK)
    return h


def hashes(*columns: pa.Array) -> list[int]:
    return [int(h) for h in hash_keys(list(columns))]


PINNED = [
    (
        pa.array([0, 1, -1, 2**63 - 1, -(2**63), 42], pa.int64()),
        [
            12188388140696036990,
            9010028711192570182,
            15564356538421152276,
            808104512018057680,
            14048610806086511324,
            3984256253453414584,
        ],
    ),
    (
        pa.array(["", "a", "abcdefgh", "abcdefghi", "ünïcødé", "user-123456789012345"]),
        [
            2308833617612525375,
            3187905193729316788,
            4436051218979061706,
            1197355067329249614,
            16617823882833618602,
            1352579828624855085,
        ],
    ),
    (
        pa.array([b"", b"\x00", b"\x00" * 8, b"\xff" * 17]),
        [2308833617612525375, 11804479766719122366, 15575123398961349693, 13629805098844227957],
    ),
    (
        pa.array([dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(1900, 1, 1)], pa.date32()),
        [12188388140696036990, 10629397009770365187, 11496749719789336221],
    ),
    (
        pa.array(
            [dt.datetime(1970, 1, 1), dt.datetime(2024, 5, 1, 12, 30, 15, 123456)],
            pa.timestamp("us"),
        ),
        [12188388140696036990, 15845791208728711320],
    ),
    (
        pa.array(
            [decimal.Decimal("0.00"), decimal.Decimal("123.45"), decimal.Decimal("-123.45")],
            pa.decimal128(10, 2),
        ),
        [4571518938864164210, 12672903794655203102, 15335472549210554077],
    ),
]


@pytest.mark.parametrize(("column", "expected"), PINNED, ids=lambda p: str(getattr(p, "type", "")))
def test_pinned_vectors(column: pa.Array, expected: list[int]) -> None:
    assert hashes(column) == expected


def test_pinned_composite_vector() -> None:
    assert hashes(pa.array(["eu", "us"]), pa.array([7, 7], pa.int64())) == [
        15981325047473086523,
        13424947511222775756,
    ]


def test_integer_widths_dates_and_timestamps_agree_on_the_same_number() -> None:
    assert hashes(pa.array([1, 42], pa.int32())) == hashes(pa.array([1, 42], pa.int64()))
    assert hashes(pa.array([1, 42], pa.int8())) == hashes(pa.array([1, 42], pa.uint16()))
    # A timestamp hashes as microseconds whatever its unit or time zone.
    moment = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    micros = pa.array([moment], pa.timestamp("us", tz="UTC"))
    assert hashes(micros) == hashes(pa.array([moment], pa.timestamp("ns", tz="Europe/Paris")))
    assert hashes(micros) == hashes(pa.array([int(moment.timestamp() * 1e6)], pa.int64()))


def test_strings_hash_as_their_utf8_bytes_and_slices_hash_like_copies() -> None:
    words = ["", "x", "hello world, longer than sixteen", "ü"]
    assert hashes(pa.array(words)) == hashes(pa.array([w.encode() for w in words]))
    assert hashes(pa.array(words, pa.large_string())) == hashes(pa.array(words))
    sliced = pa.array(["skip", *words]).slice(1)
    assert hashes(sliced) == hashes(pa.array(words))


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50))
def test_integers_follow_the_reference(values: list[int]) -> None:
    expected = [ref_key([ref_column(1, [v])]) for v in values]
    assert hashes(pa.array(values, pa.int64())) == expected


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=50))
def test_bytes_follow_the_reference(values: list[bytes]) -> None:
    assert hashes(pa.array(values, pa.binary())) == [ref_key([ref_bytes(v)]) for v in values]


@given(
    st.lists(st.tuples(st.text(max_size=12), st.integers(-(2**31), 2**31)), min_size=1, max_size=30)
)
def test_composite_keys_follow_the_reference(rows: list[tuple[str, int]]) -> None:
    names = pa.array([r[0] for r in rows])
    numbers = pa.array([r[1] for r in rows], pa.int64())
    expected = [ref_key([ref_bytes(s.encode()), ref_column(1, [n])]) for s, n in rows]
    assert hashes(names, numbers) == expected


@given(
    st.lists(
        st.decimals(min_value=-(10**8), max_value=10**8, places=2, allow_nan=False),
        min_size=1,
        max_size=30,
    )
)
def test_decimals_follow_the_reference(values: list[decimal.Decimal]) -> None:
    expected = []
    for v in values:
        unscaled = int(v.scaleb(2)) & (2**128 - 1)
        expected.append(ref_key([ref_column(2, [unscaled & MASK, unscaled >> 64])]))
    assert hashes(pa.array(values, pa.decimal128(12, 2))) == expected


def test_node_index_uses_the_low_bits_and_spreads_evenly() -> None:
    h = hash_keys([pa.array(np.arange(64_000, dtype=np.int64))])
    counts = np.bincount(node_index(h, 8), minlength=8)
    assert counts.min() > 7_500
    assert counts.max() < 8_500
    # A child's index mod its parent's level is the parent: the tree property.
    assert (node_index(h, 16) % 4 == node_index(h, 4)).all()


@pytest.mark.parametrize("m", [0, 3, 6, -4])
def test_levels_must_be_powers_of_two(m: int) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        node_index(hash_keys([pa.array([1])]), m)


def test_null_keys_and_unsupported_types_are_refused() -> None:
    with pytest.raises(ConfigError, match="nulls"):
        hash_keys([pa.array([1, None])])
    with pytest.raises(ConfigError, match="not supported"):
        hash_keys([pa.array([1.5])])
