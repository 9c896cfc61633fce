"""Catalog work retried through database weather (``firn.postgres.retry``, on
tenacity): transient errors are retried ``backoff`` apart until the deadline, a
permanent one is raised at once."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from firn.errors import ConfigError
from firn.postgres.retry import backoff, retrying_transient
from firn_services.metrics.app import _retrying


class Clock:
    """time.monotonic and time.sleep: sleeping moves the clock, and is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    monkeypatch.setattr(time, "sleep", fake.sleep)
    return fake


def failing(errors: list[BaseException]) -> tuple[list[int], object]:
    calls: list[int] = []

    def work() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "done"

    return calls, work


def test_transient_errors_are_retried_backoff_apart(clock: Clock) -> None:
    calls, work = failing([psycopg.OperationalError("restarting")] * 6)
    assert retrying_transient(work, what="test") == "done"  # type: ignore[arg-type]
    assert len(calls) == 7
    assert clock.slept == [backoff(n) for n in range(1, 7)] == [0.5, 1, 2, 4, 8, 10]


def test_a_permanent_error_is_raised_at_once(clock: Clock) -> None:
    calls, work = failing([psycopg.OperationalError("restarting"), ConfigError("no such table")])
    with pytest.raises(ConfigError, match="no such table"):
        retrying_transient(work, what="test")  # type: ignore[arg-type]
    assert (len(calls), clock.slept) == (2, [0.5])


def test_transient_errors_past_the_deadline_are_raised(clock: Clock) -> None:
    calls, work = failing([psycopg.OperationalError(f"down {n}") for n in range(100)])
    with pytest.raises(psycopg.OperationalError, match="down 7"):
        retrying_transient(work, what="test", deadline_seconds=30)  # type: ignore[arg-type]
    # 0.5 + 1 + 2 + 4 + 8 + 10 + 10 = 35.5 s slept: past 30 after the eighth try.
    assert sum(clock.slept) == 35.5
    assert len(calls) == 8


def test_the_metrics_agents_retry_catalog_calls_without_a_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    calls, work = failing([psycopg.OperationalError("down")] * 12)
    assert asyncio.run(_retrying(work)) == "done"  # type: ignore[arg-type]
    assert len(calls) == 13
    assert slept == [backoff(n) for n in range(1, 13)]
    calls, work = failing([ConfigError("bad")])
    with pytest.raises(ConfigError):
        asyncio.run(_retrying(work))  # type: ignore[arg-type]
    assert len(calls) == 1
