"""The supervisor's restart budget counts exits per time window, not per lifetime:
the sixth Postgres restart of a long-running stack once stopped it for good."""

from __future__ import annotations

from firn_localstack.supervisor import RESTART_BACKOFF, RestartBudget


def test_exits_spread_over_time_are_restarted_forever() -> None:
    budget = RestartBudget(limit=5, window=600)
    for hour in range(100):
        at = budget.exited(now=hour * 3600.0)
        assert at == hour * 3600.0 + RESTART_BACKOFF.first


def test_a_service_that_keeps_exiting_is_given_up_on() -> None:
    budget = RestartBudget(limit=5, window=600)
    waits = [budget.exited(now=float(n)) for n in range(5)]
    assert all(w is not None for w in waits)
    assert budget.exited(now=5.0) is None


def test_the_backoff_doubles_within_the_window_and_is_capped() -> None:
    budget = RestartBudget(limit=100, window=1e9)
    first, cap = RESTART_BACKOFF.first, RESTART_BACKOFF.cap
    waits = [(budget.exited(now=0.0) or 0.0) for _ in range(10)]
    assert waits[:3] == [first, 2 * first, 4 * first]
    assert max(waits) == cap
