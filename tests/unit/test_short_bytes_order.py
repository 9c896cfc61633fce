"""``short_bytes_order`` sorts short string and binary keys exactly as Arrow does:
bytes compared one by one, a prefix first, NULs and empty values among them, ties
kept in row order; anything it does not sort it leaves to Arrow (None)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

from firn.model.keyorder import SHORT_KEY_BYTES, short_bytes_order

# Few distinct bytes, so that values share prefixes, embed NULs and repeat.
SHORT_BYTES = st.binary(max_size=SHORT_KEY_BYTES).map(lambda b: bytes(x % 3 for x in b))


@given(
    values=st.lists(SHORT_BYTES, min_size=1, max_size=80),
    kind=st.sampled_from([pa.binary(), pa.large_binary()]),
    trim=st.integers(0, 5),
)
def test_short_binary_values_sort_as_arrow_sorts_them(
    values: list[bytes], kind: pa.DataType, trim: int
) -> None:
    # Sliced arrays too: an offset into the offsets, data before the first value.
    array = pa.array([b"x" * 16] * trim + values, kind).slice(trim)
    order = short_bytes_order(array)
    assert order is not None
    assert order.tolist() == pc.array_sort_indices(array).to_pylist()


@given(
    values=st.lists(st.text(max_size=4), min_size=1, max_size=60),
    kind=st.sampled_from([pa.string(), pa.large_string()]),
)
def test_short_strings_sort_as_arrow_sorts_them(values: list[str], kind: pa.DataType) -> None:
    array = pa.array(values, kind)
    order = short_bytes_order(array)
    assert order is not None
    assert order.tolist() == pc.array_sort_indices(array).to_pylist()


def test_what_it_does_not_sort_is_left_to_arrow() -> None:
    assert short_bytes_order(pa.array(["a", "b" * (SHORT_KEY_BYTES + 1)])) is None
    assert short_bytes_order(pa.array(["a", None])) is None
    assert short_bytes_order(pa.array([3, 1, 2])) is None
    assert short_bytes_order(pa.array([], pa.string())) is None
