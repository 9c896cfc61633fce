"""The SQL/JDBC catalog's rows in Firn's Postgres, and what Firn published.

``iceberg_tables`` is the layout pyiceberg's ``SqlCatalog`` and Iceberg's Java
``JdbcCatalog`` read (migration 0014): one row per table with its current metadata
file. Moving it is a compare-and-set on the old location, in the same transaction as
Firn's own record of the publication (``iceberg_publication``, ``iceberg_snapshot``,
``iceberg_file``), so the two never disagree unless someone else moved the pointer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from firn.iceberg.names import IcebergName
from firn.postgres.connection import Connection

TABLE_TYPE = "TABLE"


@dataclass(frozen=True)
class Published:
    """Firn's record of a table's last publication."""

    metadata_location: str
    firn_snapshot: int
    published_at: dt.datetime


def pointer(conn: Connection, catalog: str, name: IcebergName) -> str | None:
    """The table's current metadata location in the SQL catalog; None without a row."""
    row = conn.execute(
        "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = %s "
        "AND table_namespace = %s AND table_name = %s",
        (catalog, name.namespace_text, name.table),
    ).fetchone()
    return None if row is None else row[0]


def published(conn: Connection, table_id: int) -> Published | None:
    row = conn.execute(
        "SELECT metadata_location, firn_snapshot, published_at FROM iceberg_publication "
        "WHERE table_id = %s AND metadata_location IS NOT NULL",
        (table_id,),
    ).fetchone()
    return None if row is None else Published(row[0], int(row[1]), row[2])


def move_pointer(
    conn: Connection, catalog: str, name: IcebergName, old: str | None, new: str
) -> bool:
    """Point the table at ``new`` if it still points at ``old`` (no row for None);
    False when someone moved it first. Call inside a transaction."""
    if old is None:
        for level in range(1, len(name.namespace) + 1):
            conn.execute(
                "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, "
                "property_key, property_value) VALUES (%s, %s, 'exists', 'true') "
                "ON CONFLICT DO NOTHING",
                (catalog, ".".join(name.namespace[:level])),
            )
        return (
            conn.execute(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, "
                "metadata_location, previous_metadata_location, iceberg_type) "
                "VALUES (%s, %s, %s, %s, NULL, %s) ON CONFLICT DO NOTHING",
                (catalog, name.namespace_text, name.table, new, TABLE_TYPE),
            ).rowcount
            == 1
        )
    return (
        conn.execute(
            "UPDATE iceberg_tables SET metadata_location = %s, previous_metadata_location = %s "
            "WHERE catalog_name = %s AND table_namespace = %s AND table_name = %s "
            "AND metadata_location = %s",
            (new, old, catalog, name.namespace_text, name.table, old),
        ).rowcount
        == 1
    )


def record_publication(
    conn: Connection,
    table_id: int,
    catalog: str,
    name: IcebergName,
    metadata_location: str,
    firn_snapshot: int,
) -> None:
    conn.execute(
        "INSERT INTO iceberg_publication (table_id, catalog_name, namespace, iceberg_name, "
        "metadata_location, firn_snapshot, published_at) VALUES (%s, %s, %s, %s, %s, %s, now()) "
        "ON CONFLICT (table_id) DO UPDATE SET catalog_name = excluded.catalog_name, "
        "namespace = excluded.namespace, iceberg_name = excluded.iceberg_name, "
        "metadata_location = excluded.metadata_location, "
        "firn_snapshot = excluded.firn_snapshot, published_at = excluded.published_at, "
        "last_error = NULL, error_at = NULL",
        (table_id, catalog, name.namespace_text, name.table, metadata_location, firn_snapshot),
    )


def record_location(conn: Connection, table_id: int, metadata_location: str) -> None:
    """The table's Iceberg metadata moved without a new publication (snapshots expired)."""
    conn.execute(
        "UPDATE iceberg_publication SET metadata_location = %s WHERE table_id = %s",
        (metadata_location, table_id),
    )


def record_error(
    conn: Connection, table_id: int, catalog: str, name: IcebergName | None, error: str
) -> None:
    """Remember why the table's last publication failed (``firn status`` shows it),
    also for a table never published."""
    namespace, table = (name.namespace_text, name.table) if name else ("", "")
    with conn.transaction():
        conn.execute(
            "INSERT INTO iceberg_publication (table_id, catalog_name, namespace, iceberg_name, "
            "last_error, error_at) VALUES (%s, %s, %s, %s, %s, now()) "
            "ON CONFLICT (table_id) DO UPDATE SET last_error = excluded.last_error, "
            "error_at = excluded.error_at",
            (table_id, catalog, namespace, table, error[:2000]),
        )


def record_snapshot(
    conn: Connection,
    table_id: int,
    iceberg_snapshot: int,
    firn_snapshot: int,
    sequence_number: int,
    committed_at: dt.datetime,
) -> float:
    """Record a published snapshot; the seconds from ``committed_at`` to its
    publication, on the catalog's clock."""
    row = conn.execute(
        "INSERT INTO iceberg_snapshot (table_id, iceberg_snapshot_id, firn_snapshot, "
        "sequence_number, committed_at, published_at) VALUES (%s, %s, %s, %s, %s, now()) "
        "RETURNING extract(epoch FROM published_at - committed_at)",
        (table_id, iceberg_snapshot, firn_snapshot, sequence_number, committed_at),
    ).fetchone()
    return max(0.0, float(row[0])) if row else 0.0


def forget_snapshots(conn: Connection, table_id: int, keep: Sequence[int]) -> None:
    """Drop the rows of published snapshots not in ``keep`` (they expired)."""
    conn.execute(
        "DELETE FROM iceberg_snapshot WHERE table_id = %s AND NOT iceberg_snapshot_id = ANY(%s)",
        (table_id, list(keep)),
    )


def use_files(
    conn: Connection,
    table_id: int,
    paths: Sequence[str],
    sequence: int,
    *,
    owner: str | None = None,
) -> None:
    """Record that the snapshot at ``sequence`` uses ``paths`` (relative to the table);
    a delete file's ``owner`` is the newest delete manifest listing it."""
    if not paths:
        return
    conn.execute(
        "INSERT INTO iceberg_file (table_id, path, last_sequence, owner) "
        "SELECT %s, p, %s, %s FROM unnest(%s::text[]) AS p "
        "ON CONFLICT (table_id, path) DO UPDATE SET last_sequence = "
        "greatest(iceberg_file.last_sequence, excluded.last_sequence), "
        "owner = coalesce(excluded.owner, iceberg_file.owner)",
        (table_id, sequence, owner, list(paths)),
    )


def use_owned(conn: Connection, table_id: int, owners: Sequence[str], sequence: int) -> None:
    """The delete files of reused delete manifests live on with them."""
    if owners:
        conn.execute(
            "UPDATE iceberg_file SET last_sequence = greatest(last_sequence, %s) "
            "WHERE table_id = %s AND owner = ANY(%s)",
            (sequence, table_id, list(owners)),
        )


def unused_files(conn: Connection, table_id: int) -> list[str]:
    """Files no retained published snapshot uses: every snapshot at or below their
    last sequence number has expired."""
    rows = conn.execute(
        "SELECT path FROM iceberg_file WHERE table_id = %s AND last_sequence < "
        "(SELECT coalesce(min(sequence_number), 0) FROM iceberg_snapshot WHERE table_id = %s) "
        "ORDER BY path",
        (table_id, table_id),
    ).fetchall()
    return [str(path) for (path,) in rows]


def forget_files(conn: Connection, table_id: int, paths: Sequence[str]) -> None:
    with conn.transaction():
        conn.execute(
            "DELETE FROM iceberg_file WHERE table_id = %s AND path = ANY(%s)",
            (table_id, list(paths)),
        )


def drop(conn: Connection, table_id: int, catalog: str, name: IcebergName) -> bool:
    """Withdraw a publication (``iceberg.publish`` turned off): the catalog row goes,
    and Firn's retention no longer keeps snapshots for it. True if there was one."""
    with conn.transaction():
        gone = conn.execute(
            "DELETE FROM iceberg_tables WHERE catalog_name = %s AND table_namespace = %s "
            "AND table_name = %s",
            (catalog, name.namespace_text, name.table),
        ).rowcount
        conn.execute("DELETE FROM iceberg_publication WHERE table_id = %s", (table_id,))
        conn.execute("DELETE FROM iceberg_snapshot WHERE table_id = %s", (table_id,))
    return bool(gone)
