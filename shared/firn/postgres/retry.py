"""Retrying catalog work through database weather (restarts, failovers, deadlocks).

The work passed in must be a whole transaction (or idempotent steps), so running it
again on a fresh connection is safe: a transaction cut off by a restart was rolled
back by Postgres, and a deadlock victim's transaction was rolled back too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

from firn.errors import FirnError
from firn.observability.instruments import POSTGRES_ERRORS
from firn.postgres.connection import TRANSIENT_ERRORS

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 10.0


def is_transient(exc: BaseException) -> bool:
    """Whether trying the same work again, later, may succeed.

    Every place that catches a failure of catalog work asks this once, so this is
    also where a Postgres error is counted (``firn_postgres_errors_total``)."""
    if isinstance(exc, FirnError):
        return exc.retryable
    if isinstance(exc, psycopg.Error):
        POSTGRES_ERRORS.labels(type(exc).__name__).inc()
    return isinstance(exc, TRANSIENT_ERRORS)


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): doubling, capped."""
    return float(min(FIRST_BACKOFF_SECONDS * 2.0 ** (attempt - 1), MAX_BACKOFF_SECONDS))


def retrying_transient(work: Callable[[], T], *, what: str, deadline_seconds: float = 300.0) -> T:
    """``work()``, retried with backoff while it fails transiently, for up to
    ``deadline_seconds``; then (or on a permanent error) the error is raised."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return work()
        except Exception as exc:
            attempt += 1
            if not is_transient(exc) or time.monotonic() - started > deadline_seconds:
                raise
            wait = backoff(attempt)
            log.warning("%s failed (%r); retrying in %.1fs", what, exc, wait)
            time.sleep(wait)
