"""Retrying catalog work through database weather (restarts, failovers, deadlocks).

The work passed in must be a whole transaction (or idempotent steps), so running it
again on a fresh connection is safe: a transaction cut off by a restart was rolled
back by Postgres, and a deadlock victim's transaction was rolled back too.

The retrying itself is tenacity's: ``transient_retries`` is the one policy (retry
what ``is_transient`` says may pass, ``backoff`` apart), shared by the blocking
``retrying_transient`` and the services' async loops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    stop_never,
)

from firn.errors import FirnError
from firn.model.backoff import Backoff
from firn.postgres.connection import TRANSIENT_ERRORS
from firn.sensors import sensors

log = logging.getLogger(__name__)

T = TypeVar("T")

CATALOG_BACKOFF = Backoff(first=0.5, cap=10.0)


def is_transient(exc: BaseException) -> bool:
    """Whether trying the same work again, later, may succeed.

    Every place that catches a failure of catalog work asks this once, so this is
    also where a Postgres error is counted (``firn_postgres_errors_total``)."""
    if isinstance(exc, FirnError):
        return exc.retryable
    if isinstance(exc, psycopg.Error):
        sensors().postgres_error(type(exc).__name__)
    return isinstance(exc, TRANSIENT_ERRORS)


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): doubling, capped."""
    return CATALOG_BACKOFF.after(attempt)


WAIT = CATALOG_BACKOFF.as_tenacity_wait()
"""``backoff`` as a tenacity wait."""


def transient_retries(what: str, deadline_seconds: float | None = None) -> dict[str, Any]:
    """The arguments of a tenacity ``Retrying``/``AsyncRetrying`` that retries ``what``
    while it fails transiently, ``backoff`` apart, logging each retry; for up to
    ``deadline_seconds`` (None: for ever). The last error is raised as it is."""

    def log_retry(state: RetryCallState) -> None:
        assert state.outcome is not None
        assert state.next_action is not None
        log.warning(
            "%s failed (%r); retrying in %.1fs",
            what,
            state.outcome.exception(),
            state.next_action.sleep,
        )

    return {
        "retry": retry_if_exception(is_transient),
        "wait": WAIT,
        "stop": stop_never if deadline_seconds is None else stop_after_delay(deadline_seconds),
        "before_sleep": log_retry,
        "reraise": True,
    }


def retrying_transient(work: Callable[[], T], *, what: str, deadline_seconds: float = 300.0) -> T:
    """``work()``, retried with backoff while it fails transiently, for up to
    ``deadline_seconds``; then (or on a permanent error) the error is raised."""
    return Retrying(**transient_retries(what, deadline_seconds))(work)
