"""The shared poll loop returns the first truthy answer and fails by name."""

from __future__ import annotations

import itertools

import pytest

from tests.waiting import eventually


def test_it_returns_the_first_truthy_answer() -> None:
    answers = iter([0, None, [], 7, 8])
    assert eventually(lambda: next(answers), timeout=5, what="a number", every=0) == 7


def test_it_names_what_never_came_and_the_last_answer() -> None:
    counter = itertools.count()
    with pytest.raises(AssertionError, match=r"not within 0s: the answer \(last: 0\)\nlogs"):
        eventually(
            lambda: 0 * next(counter),
            timeout=0.05,
            what="the answer",
            every=0.01,
            describe=lambda: "logs",
        )
