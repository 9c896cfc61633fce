"""Read-only views of the Iceberg publication (``firn.iceberg`` writes it): per table,
what was last published and how fresh it is, and the lag of every retained published
snapshot over time. ``firn status``, ``firn iceberg tables`` and the dashboard read it;
nothing here changes state.

A publication's lag is ``published_at - committed_at`` of its ``iceberg_snapshot``
row: how long the oldest change it shows waited to become visible to Iceberg readers.
A table is *behind* while compaction, load or schema snapshots newer than the one
published wait (producer commits alone do not change what is published, as in
``Publisher.due``); how far behind is the age of the oldest of them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from firn.postgres.connection import Connection

State = Literal["off", "never", "error", "behind", "current"]

LAG_WINDOW = 3600.0
"""Seconds of publications the lag chart shows."""

_PUBLISH = "coalesce((t.properties->>'iceberg.publish')::boolean, true)"


@dataclass(frozen=True)
class PublicationStatus:
    """One table's publication: its last one, and what waits to be published."""

    table: str
    table_id: int
    publish: bool
    """The table's ``iceberg.publish`` property."""
    catalog_name: str | None
    identifier: str | None
    """The Iceberg identifier it was published under (None before the first)."""
    metadata_location: str | None
    firn_snapshot: int | None
    published_at: dt.datetime | None
    lag_seconds: float | None
    """Of the last publication: its newest ``iceberg_snapshot`` row's
    ``published_at - committed_at``."""
    waiting_snapshots: int
    """Compaction, load and schema snapshots after the published one."""
    behind_seconds: float | None
    """Age of the oldest waiting snapshot (None when none waits)."""
    last_error: str | None
    error_at: dt.datetime | None

    @property
    def state(self) -> State:
        """``off`` (iceberg.publish false), ``never`` published, ``error`` (the last
        attempt failed), ``behind`` (newer snapshots wait) or ``current``."""
        if not self.publish:
            return "off"
        if self.last_error is not None:
            return "error"
        if self.published_at is None:
            return "never"
        return "behind" if self.waiting_snapshots else "current"

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "identifier": self.identifier,
            "catalog": self.catalog_name,
            "metadata_location": self.metadata_location,
            "firn_snapshot": self.firn_snapshot,
            "published_at": _iso(self.published_at),
            "lag_seconds": _rounded(self.lag_seconds),
            "waiting_snapshots": self.waiting_snapshots,
            "behind_seconds": _rounded(self.behind_seconds),
            "last_error": self.last_error,
            "error_at": _iso(self.error_at),
        }


@dataclass(frozen=True)
class LagPoint:
    """One retained published Iceberg snapshot and how long its oldest change waited."""

    table: str
    published_at: dt.datetime
    lag_seconds: float
    firn_snapshot: int


def publication_statuses(conn: Connection, table_id: int | None = None) -> list[PublicationStatus]:
    """Every table's publication (or one table's), by table name."""
    rows = conn.execute(
        f"SELECT t.name, t.table_id, {_PUBLISH}, p.catalog_name, "
        "CASE WHEN p.table_id IS NULL THEN NULL WHEN p.namespace = '' THEN p.iceberg_name "
        "ELSE p.namespace || '.' || p.iceberg_name END, "
        "p.metadata_location, p.firn_snapshot, p.published_at, "
        "(SELECT extract(epoch FROM s.published_at - s.committed_at) FROM iceberg_snapshot s "
        "WHERE s.table_id = t.table_id ORDER BY s.published_at DESC, s.sequence_number DESC "
        "LIMIT 1), w.waiting, extract(epoch FROM now() - w.oldest), p.last_error, p.error_at "
        "FROM catalog_table t "
        "LEFT JOIN iceberg_publication p ON p.table_id = t.table_id "
        "CROSS JOIN LATERAL (SELECT count(*) AS waiting, min(n.created_at) AS oldest "
        "FROM snapshot n WHERE n.table_id = t.table_id AND n.kind <> 'commit' "
        "AND n.snapshot_id > coalesce(p.firn_snapshot, 0)) w "
        "WHERE %(table_id)s::bigint IS NULL OR t.table_id = %(table_id)s::bigint "
        "ORDER BY t.name",
        {"table_id": table_id},
    ).fetchall()
    return [
        PublicationStatus(
            table=name,
            table_id=int(tid),
            publish=bool(publish),
            catalog_name=catalog,
            identifier=identifier,
            metadata_location=location,
            firn_snapshot=None if snapshot is None else int(snapshot),
            published_at=published_at,
            lag_seconds=_seconds(lag),
            waiting_snapshots=int(waiting or 0),
            behind_seconds=_seconds(behind) if waiting else None,
            last_error=error,
            error_at=error_at,
        )
        for (
            name,
            tid,
            publish,
            catalog,
            identifier,
            location,
            snapshot,
            published_at,
            lag,
            waiting,
            behind,
            error,
            error_at,
        ) in rows
    ]


def publication_status(conn: Connection, table_id: int) -> PublicationStatus | None:
    """One table's publication; None if the table does not exist."""
    found = publication_statuses(conn, table_id)
    return found[0] if found else None


def publication_lags(
    conn: Connection, table_id: int | None = None, window: float = LAG_WINDOW
) -> list[LagPoint]:
    """The lag of every retained publication of the last ``window`` seconds, of one
    table or all, oldest first (Iceberg snapshots that expired are gone from it)."""
    rows = conn.execute(
        "SELECT t.name, s.published_at, extract(epoch FROM s.published_at - s.committed_at), "
        "s.firn_snapshot FROM iceberg_snapshot s JOIN catalog_table t USING (table_id) "
        "WHERE s.published_at >= now() - make_interval(secs => %(window)s) "
        "AND (%(table_id)s::bigint IS NULL OR s.table_id = %(table_id)s::bigint) "
        "ORDER BY s.published_at, s.sequence_number",
        {"table_id": table_id, "window": window},
    ).fetchall()
    return [
        LagPoint(name, at, max(0.0, float(lag)), int(snapshot)) for name, at, lag, snapshot in rows
    ]


def newest_change(conn: Connection, table_id: int) -> int:
    """The table's newest compaction, load or schema snapshot (0 when it has none):
    what its Iceberg table shows (its current snapshot's ``firn.snapshot``, or a later
    one) once the publication has caught up."""
    row = conn.execute(
        "SELECT coalesce(max(snapshot_id), 0) FROM snapshot "
        "WHERE table_id = %s AND kind <> 'commit'",
        (table_id,),
    ).fetchone()
    return 0 if row is None else int(row[0])


def _seconds(value: Any) -> float | None:
    return None if value is None else max(0.0, float(value))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _iso(at: dt.datetime | None) -> str | None:
    return None if at is None else at.isoformat()
