"""Waiting for what the system does in its own time: one poll loop for every test
(``eventually``), and one reader for what a topic carries (``messages_on``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Message

from firn.kafka import consumer
from firn.settings import FirnSettings

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


def messages_on(
    settings: FirnSettings,
    topic: str,
    group: str,
    *,
    expect: int | None,
    timeout: float = 60.0,
    extra_seconds: float = 0.0,
    every: float = 0.5,
) -> list[Message]:
    """The messages on ``topic``, read from the start by a new member of ``group``:
    ``expect`` of them, then whatever else arrives within ``extra_seconds`` (a test
    that must see nothing more); with ``expect`` None, everything that arrives before
    ``timeout``. Fewer when ``timeout`` passes first: the caller's assertion says what
    is missing."""
    reader = consumer(settings, group_id=group)
    reader.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            message = reader.poll(every)
            if message is not None and message.error() is None:
                got.append(message)
            if expect is not None and len(got) >= expect:
                if extra_seconds <= 0:
                    break
                deadline = min(deadline, time.monotonic() + extra_seconds)
    finally:
        reader.close()
    return got
