"""Waiting for what the system does in its own time: one poll loop for every test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    every: float = 0.1,
    describe: Callable[[], str] = lambda: "",
) -> T:
    """``check()``'s first truthy result, asking every ``every`` seconds; an
    ``AssertionError`` naming ``what`` (and what ``describe`` adds, such as a
    service's log) once ``timeout`` seconds pass without one. ``check`` may raise
    to fail at once (a service that exited)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            detail = describe()
            raise AssertionError(
                f"not within {timeout:.0f}s: {what} (last: {got!r})"
                + (f"\n{detail}" if detail else "")
            )
        time.sleep(every)
