"""The publisher's handler and sweep: every Firn table kept published as an Apache
Iceberg table (``firn.iceberg.publisher``).

A compaction event wakes the table it names: the publication brings the table's
Iceberg view up to its newest snapshot, whatever the event says. The sweep, every
``FIRN_PUBLISHER_SWEEP_INTERVAL`` seconds, publishes every table whose view is behind
(``Publisher.due``): never published, changed by a load or a schema change (no event
announces those), an event that was lost, a table another publisher held ("busy")
while a newer snapshot came, or one whose last try failed.

Idempotent: a publication reads the newest snapshot under a per-table lock, so a
repeated event, or several publishers woken for one table, find it ``unchanged`` (or
``busy``) and write nothing.

One table's failure never stops the others. Database weather (a transient Postgres
error, the catalog unreachable) is raised: the consume loop retries the event in
hand with backoff, and a sweep waits for its next turn, on a connection opened again.
Anything else belongs to one table: it is logged, counted
(``firn_publication_errors_total``) and recorded by the publisher for ``firn status``;
the sweep tries the table again, waiting longer after each failure in a row (up to
``RETRY_CAP_SECONDS``), and goes on with the rest. A sweep stops after
``SWEEP_BUDGET_SECONDS`` so the consume loop keeps polling; the next one starts with
the tables this one did not reach.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import psycopg

from firn.errors import ServiceError
from firn.events.compactions import CompactionEvent
from firn.iceberg.publisher import Publication
from firn.logs import with_context
from firn.model.backoff import Backoff
from firn.observability.instruments import (
    PUBLICATION_BYTES,
    PUBLICATION_ERRORS,
    PUBLICATION_LAG,
    PUBLICATIONS,
)
from firn.postgres.retry import is_transient

log = logging.getLogger(__name__)

SWEEP_BUDGET_SECONDS = 60.0
"""Longest one sweep publishes before handing the loop back (it polls between sweeps;
a sweep far past ``max.poll.interval.ms`` would cost the consumer its group)."""
RETRY_CAP_SECONDS = 300.0
"""Longest a table that keeps failing waits between two tries of the sweep."""


class TablePublisher(Protocol):
    """What the service needs of ``firn.iceberg.publisher.Publisher``."""

    def due(self) -> list[int]: ...

    def publish(self, table: str | int) -> Publication: ...


@dataclass
class _Failing:
    """A table whose publications failed ``times`` in a row; tried again at ``retry_at``."""

    times: int
    retry_at: float


class Publishing:
    """Publishes the tables compaction events name, and sweeps for the rest."""

    def __init__(
        self,
        publisher: Callable[[], TablePublisher],
        *,
        interval: float,
        min_interval: float = 0.0,
        gather: float = 0.0,
        sweep_budget: float = SWEEP_BUDGET_SECONDS,
        retry_cap: float = RETRY_CAP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``publisher`` gives a publisher on the current catalog connection (asked
        for at each use, so a connection opened again after a restart is used);
        ``interval`` is the sweep's, the first wait of a failing table;
        ``min_interval``: an event publishes a table this publisher published less
        than that long ago only at the next sweep; ``gather``: any other event
        publishes its table that long after it, with the compactions that landed
        meanwhile (``idle`` publishes it)."""
        self._publisher = publisher
        self.interval = interval
        self.min_interval = min_interval
        self.gather = gather
        self._published: dict[int, float] = {}
        """When this publisher last published each table (recent ones only)."""
        self._gathering: dict[int, float] = {}
        """Tables an event asked to publish, and when."""
        self._swept_at = clock()
        self.sweep_budget = sweep_budget
        self.retry_cap = retry_cap
        self._clock = clock
        self._failing: dict[int, _Failing] = {}
        self._last_swept = 0
        """The table the last sweep ended with: the next one starts after it."""

    def compaction(self, compaction: CompactionEvent) -> None:
        """A compaction committed: publish its table ``gather`` seconds from now (a
        table that is failing too: the event brings a new snapshot), unless this
        publisher published it less than ``min_interval`` ago; then the next sweep
        publishes it. Either way one Iceberg snapshot takes in whatever else compacted
        meanwhile: a fleet's commit makes each of a table's partitions due at once,
        and their compactions land within a second or so, each an Iceberg snapshot
        of its own otherwise, at a publication's whole cost (issue 37)."""
        table_id = compaction.table_id
        now = self._clock()
        last = self._published.get(table_id)
        if last is not None and now - last < self.min_interval:
            PUBLICATIONS.labels("deferred").inc()
            return
        if self.gather <= 0:
            self.publish(table_id)
            return
        PUBLICATIONS.labels("deferred").inc()
        self._gathering.setdefault(table_id, now + self.gather)

    def idle(self) -> None:
        """Called between messages: publish the tables whose gathering time is up,
        and sweep every ``interval`` seconds."""
        now = self._clock()
        for table_id, at in sorted(self._gathering.items(), key=lambda item: item[1]):
            if at > now:
                break
            self.publish(table_id)
        if now - self._swept_at >= self.interval:
            self._swept_at = now
            self.sweep()

    def sweep(self) -> list[Publication]:
        """Publish every table that is behind and not waiting after a failure; what
        was published (or found unchanged, busy, ...), in the order tried."""
        began = self._clock()
        due = self._publisher().due()
        due = [t for t in due if t > self._last_swept] + [t for t in due if t <= self._last_swept]
        done: list[Publication] = []
        for table_id in due:
            failing = self._failing.get(table_id)
            if failing is not None and failing.retry_at > self._clock():
                continue
            if self._clock() - began >= self.sweep_budget:
                log.info("sweep stopped after %.0fs; the rest wait for the next", self.sweep_budget)
                break
            self._last_swept = table_id
            publication = self.publish(table_id)
            if publication is not None:
                done.append(publication)
        else:
            self._last_swept = 0
        gone = set(self._failing) - set(due)  # published elsewhere, dropped, or turned off
        for table_id in gone:
            del self._failing[table_id]
        return done

    def publish(self, table_id: int) -> Publication | None:
        """Publish one table; None when it failed (logged, counted, to be tried
        again). Database weather is raised for the caller to retry."""
        try:
            publication = self._publisher().publish(table_id)
        except Exception as exc:
            transient = is_transient(exc)
            if transient and isinstance(exc, psycopg.Error | ServiceError):
                raise  # the catalog is away: every table would fail alike
            self._gathering.pop(table_id, None)  # the sweep tries it again
            self._failed(table_id, exc)
            return None
        self._gathering.pop(table_id, None)
        self._failing.pop(table_id, None)
        self._observe(publication)
        if publication.outcome == "published":
            self._remember(table_id)
        return publication

    def _remember(self, table_id: int) -> None:
        """Note the publication; forget those older than ``min_interval``, so the
        record stays as small as the tables published lately."""
        now = self._clock()
        if len(self._published) > 1024:
            self._published = {
                t: at for t, at in self._published.items() if now - at < self.min_interval
            }
        self._published[table_id] = now

    def _failed(self, table_id: int, exc: BaseException) -> None:
        PUBLICATION_ERRORS.labels(type(exc).__name__).inc()
        before = self._failing.get(table_id)
        times = before.times + 1 if before is not None else 1
        wait = Backoff(first=self.interval, cap=self.retry_cap).after(times)
        self._failing[table_id] = _Failing(times, self._clock() + wait)
        with_context(log, table=table_id).warning(
            "publication failed (%d in a row), tried again in %.0fs: %s: %s",
            times,
            wait,
            type(exc).__name__,
            exc,
        )

    @staticmethod
    def _observe(publication: Publication) -> None:
        PUBLICATIONS.labels(publication.outcome).inc()
        if publication.outcome == "published":
            if publication.lag_seconds is not None:
                PUBLICATION_LAG.labels(publication.table).observe(publication.lag_seconds)
            PUBLICATION_BYTES.labels(publication.table).inc(publication.bytes_written)
            if publication.changed_outside:
                log.warning(
                    "%s: the Iceberg table %s had been changed outside Firn; republished",
                    publication.table,
                    publication.identifier,
                )
        elif publication.outcome == "refused":
            log.warning("%s: not published: %s", publication.table, publication.message)
        elif publication.outcome == "disabled":
            log.info("%s: not published: %s", publication.table, publication.message)
        elif publication.outcome == "busy":
            log.debug("%s: another publisher is publishing it", publication.table)
