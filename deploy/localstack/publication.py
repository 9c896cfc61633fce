"""The demo's look at the Iceberg publication (the publisher service's work): how long
each compaction waited to become visible to Iceberg readers, and whether the
published table, once it shows the newest compaction, holds the rows Firn does.

What is published is what compaction has folded (``firn.iceberg.publisher``): the
Iceberg table at Firn snapshot S equals ``Table.scan(snapshot=S, merged_only=True)``,
which is ``Table.read()`` once every change is folded. So the check waits until the
Iceberg table's current snapshot names (``firn.snapshot``) the table's newest
compaction, load or schema snapshot, and compares the two by primary key, as the
model check compares ``read()`` with the producer's model.

A publication's lag is its ``iceberg_snapshot`` row's ``published_at - committed_at``
(``firn.catalog.publication``); the demo counts the rows that show a Firn snapshot
newer than the table's at the start, so a kept table's earlier ones stay out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog as IcebergCatalog
from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table as IcebergTable

from firn.api.catalog import Catalog
from firn.api.table import Table
from firn.catalog.progress import percentile
from firn.catalog.publication import newest_change, publication_lags, publication_status
from firn.errors import ConfigError
from firn.iceberg.names import iceberg_name
from firn.iceberg.properties import catalog_properties, io_properties
from firn.settings import FirnSettings

from .workload import ModelCheck, ReferenceModel

CATCH_UP_SECONDS = 30.0
"""How long the check waits for the Iceberg table to show the newest compaction."""
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class PublicationCheck:
    """The demo table's publications during the run and how the published table
    compares with Firn's."""

    publications: int = 0
    """``iceberg_snapshot`` rows of the run (showing a snapshot newer than the start)."""
    lag_p50: float | None = None
    lag_p95: float | None = None
    lag_max: float | None = None
    firn_snapshot: int | None = None
    """The Firn snapshot the compared Iceberg snapshot shows."""
    check: ModelCheck | None = None
    """The published rows against Firn's folded view at ``firn_snapshot`` (None: not
    compared; ``error`` says why)."""
    error: str | None = None

    @classmethod
    def of_lags(
        cls,
        lags: list[float],
        *,
        firn_snapshot: int | None = None,
        check: ModelCheck | None = None,
        error: str | None = None,
    ) -> PublicationCheck:
        return cls(
            publications=len(lags),
            lag_p50=percentile(lags, 0.5) if lags else None,
            lag_p95=percentile(lags, 0.95) if lags else None,
            lag_max=max(lags) if lags else None,
            firn_snapshot=firn_snapshot,
            check=check,
            error=error,
        )

    @property
    def matches(self) -> bool | None:
        return None if self.check is None else self.check.matches

    def as_dict(self) -> dict[str, Any]:
        check = self.check
        return {
            "publications": self.publications,
            "lag_p50_s": _rounded(self.lag_p50),
            "lag_p95_s": _rounded(self.lag_p95),
            "lag_max_s": _rounded(self.lag_max),
            "matches": self.matches,
            "firn_snapshot": self.firn_snapshot,
            "rows": None if check is None else check.actual_rows,
            "differences": None
            if check is None or check.matches
            else {
                "expected_rows": check.expected_rows,
                "missing": check.missing,
                "unexpected": check.unexpected,
                "different": check.different,
                "examples": list(check.examples),
            },
            "error": self.error,
        }


def check_publication(
    settings: FirnSettings,
    catalog: Catalog,
    table: Table,
    after_snapshot: int,
    *,
    window: float,
    timeout: float = CATCH_UP_SECONDS,
) -> PublicationCheck:
    """Wait up to ``timeout`` seconds for ``table``'s Iceberg table to show its newest
    compaction, compare the two, and sum up the lags of the publications of the last
    ``window`` seconds that show a snapshot after ``after_snapshot``. Never raises for
    what it finds: a publication that is off, failing or behind is its ``error``."""
    firn_snapshot: int | None = None
    check: ModelCheck | None = None
    try:
        firn_snapshot, check, error = _compare(settings, catalog, table, timeout)
    except Exception as exc:  # a reader's failure is reported, not the demo's end
        error = f"cannot read the published table: {type(exc).__name__}: {exc}"
    lags = [
        point.lag_seconds
        for point in publication_lags(catalog.conn, table.table_id, window + timeout)
        if point.firn_snapshot > after_snapshot
    ]
    return PublicationCheck.of_lags(lags, firn_snapshot=firn_snapshot, check=check, error=error)


def _compare(
    settings: FirnSettings, catalog: Catalog, table: Table, timeout: float
) -> tuple[int | None, ModelCheck | None, str | None]:
    """(the Firn snapshot compared, the comparison, why there is none)."""
    conn = catalog.conn
    status = publication_status(conn, table.table_id)
    if status is not None and not status.publish:
        return None, None, "not published: the table's iceberg.publish is false"
    try:
        identifier = str(iceberg_name(table.name))
    except ConfigError as exc:
        return None, None, str(exc)
    properties = {**catalog_properties(settings), **io_properties(settings)}
    deadline = time.monotonic() + timeout
    with load_catalog(settings.iceberg_catalog, **properties) as iceberg:
        while True:
            newest = newest_change(conn, table.table_id)
            published, shown, problem = _current(iceberg, identifier)
            if published is not None and shown is not None and shown >= newest:
                break
            if time.monotonic() >= deadline:
                status = publication_status(conn, table.table_id)
                failing = (
                    f"; the publisher's last error: {status.last_error}"
                    if status is not None and status.last_error
                    else ""
                )
                return (
                    shown,
                    None,
                    f"the Iceberg table {identifier} did not show the newest compaction "
                    f"(snapshot {newest}) within {timeout:g}s: {problem}{failing}",
                )
            time.sleep(POLL_SECONDS)
        rows = published.scan(snapshot_id=published.metadata.current_snapshot_id).to_arrow()
    folded = table.scan(snapshot=shown, merged_only=True).to_arrow()
    return shown, ReferenceModel.from_table(folded).compare(rows), None


def _current(
    iceberg: IcebergCatalog, identifier: str
) -> tuple[IcebergTable | None, int | None, str]:
    """The published table as it is now, the Firn snapshot it shows, and what is wrong
    when it shows none."""
    try:
        published = iceberg.load_table(identifier)
    except Exception as exc:  # not published yet, or failing: asked again
        return None, None, f"cannot load it: {type(exc).__name__}: {exc}"
    current = published.current_snapshot()
    value = (
        None if current is None or current.summary is None else current.summary.get("firn.snapshot")
    )
    if value is None:
        return published, None, "it has no snapshot from Firn"
    shown = int(value)
    return published, shown, f"it shows snapshot {shown}"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
