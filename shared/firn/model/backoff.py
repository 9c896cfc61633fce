"""The one retry backoff: a wait that doubles with each failure in a row, up to a
cap. Catalog retries, the consume loop, task attempts, failed publications and the
local stack's service restarts each hold a ``Backoff`` with their own numbers."""

from __future__ import annotations

from dataclasses import dataclass

from tenacity import wait_exponential


@dataclass(frozen=True)
class Backoff:
    first: float
    """Seconds before the first retry."""
    cap: float
    """The most seconds between two tries."""

    def after(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row (1 for the first)."""
        return float(min(self.first * 2.0 ** (max(failures, 1) - 1), self.cap))

    def as_tenacity_wait(self) -> wait_exponential:
        """The same waits for a tenacity retry loop (which numbers failed attempts
        from 1, as ``after`` does)."""
        return wait_exponential(multiplier=self.first, max=self.cap)
