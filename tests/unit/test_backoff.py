"""The one backoff: doubling from its first wait up to its cap, and the same waits
when tenacity drives the retries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tenacity import RetryCallState, Retrying

from firn.model.backoff import Backoff


def test_it_doubles_from_the_first_wait_up_to_the_cap() -> None:
    waits = [Backoff(first=0.5, cap=10.0).after(n) for n in range(1, 8)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_no_failure_yet_waits_as_long_as_the_first() -> None:
    assert Backoff(first=5.0, cap=300.0).after(0) == 5.0


@given(
    st.floats(min_value=0.01, max_value=100.0),
    st.floats(min_value=0.01, max_value=1000.0),
    st.integers(min_value=1, max_value=40),
)
def test_tenacity_waits_as_long_as_after_says(first: float, cap: float, failures: int) -> None:
    policy = Backoff(first=first, cap=cap)
    state = RetryCallState(Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = failures
    assert policy.as_tenacity_wait()(state) == policy.after(failures)
