"""``integer_order`` sorts positions like ``np.argsort``: keys in ascending order,
whether the values pack beside their row numbers or fall back to ``argsort``."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from firn.model.keyorder import integer_order

INT64 = np.iinfo(np.int64)


@given(
    arrays(
        st.sampled_from([np.int8, np.int32, np.int64]),
        st.integers(0, 300),
        elements=st.integers(-(2**7), 2**7 - 1),
    )
)
def test_small_values_sort_like_argsort(values: np.ndarray) -> None:
    order = integer_order(values)
    assert order.dtype == np.int64
    assert sorted(order.tolist()) == list(range(len(values)))
    assert np.array_equal(values[order], np.sort(values))


@given(st.lists(st.integers(INT64.min, INT64.max), max_size=200))
def test_any_int64_values_sort_like_argsort(values: list[int]) -> None:
    """Spans too wide to pack (the extremes of int64) take argsort's way."""
    array = np.array(values, dtype=np.int64)
    order = integer_order(array)
    assert sorted(order.tolist()) == list(range(len(values)))
    assert np.array_equal(array[order], np.sort(array))


def test_dense_ids_pack() -> None:
    rng = np.random.default_rng(3)
    values = rng.permutation(1 << 20).astype(np.int64) - (1 << 40)
    order = integer_order(values)
    assert np.array_equal(values[order], np.sort(values))
