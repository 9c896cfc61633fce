"""Reading a published Iceberg table with engines that hold no Firn code: pyiceberg
through the SQL catalog (with ``firn iceberg properties``), DuckDB through its
iceberg extension (loaded from the ``duckdb-extension-*`` wheels: DuckDB cannot
download extensions here)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table as IcebergTable

import firn
from firn.iceberg.properties import catalog_properties
from firn.settings import FirnSettings

CATALOG = "firn"


def iceberg_table(properties: Mapping[str, str], name: str) -> IcebergTable:
    """The Iceberg table Firn table ``name`` is published as (a name without a dot is
    in namespace ``default``)."""
    return load_catalog(CATALOG, **properties).load_table(
        name if "." in name else f"default.{name}"
    )


def pyiceberg_rows(
    properties: Mapping[str, str], name: str, snapshot_id: int | None = None
) -> pa.Table:
    return iceberg_table(properties, name).scan(snapshot_id=snapshot_id).to_arrow()


@cache
def _extension(package: str) -> str:
    module = __import__(package)
    found = sorted(Path(module.__file__).parent.rglob("*.duckdb_extension"))
    assert found, f"{package} holds no .duckdb_extension file"
    return str(found[0])


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect()
    conn.execute("SET autoinstall_known_extensions = false")
    conn.execute("SET autoload_known_extensions = false")
    for package in ("duckdb_extension_httpfs", "duckdb_extension_avro", "duckdb_extension_iceberg"):
        conn.execute(f"LOAD '{_extension(package)}'")
    return conn


def duckdb_rows(metadata_location: str, columns: str = "*") -> pa.Table:
    with duckdb_connection() as conn:
        return conn.execute(
            f"SELECT {columns} FROM iceberg_scan('{metadata_location}')"
        ).to_arrow_table()


def check_publications(settings: FirnSettings, table: firn.Table, timeout: float) -> None:
    """Wait until ``table``'s Iceberg table shows its newest compaction, then check
    it equals ``table.read()``, and every retained published snapshot equals Firn's
    folded view (``merged_only``) at the Firn snapshot its summary names."""
    properties = catalog_properties(settings)
    key = list(table.definition.primary_key)
    deadline = time.monotonic() + timeout
    while True:
        latest = table.catalog.conn.execute(  # type: ignore[attr-defined]
            "SELECT max(snapshot_id) FROM snapshot WHERE table_id = %s AND kind <> 'commit'",
            (table.table_id,),
        ).fetchone()[0]
        published = iceberg_table(properties, table.name)
        current = published.current_snapshot()
        shown = int(current.summary["firn.snapshot"]) if current and current.summary else -1
        if latest is None or shown >= latest:
            break
        assert time.monotonic() < deadline, f"Iceberg shows {shown}, Firn is at {latest}"
        time.sleep(0.5)
    assert _by(published.scan().to_arrow(), key) == _by(table.read(), key)
    for snap in published.snapshots():
        assert snap.summary is not None
        firn_snapshot = int(snap.summary["firn.snapshot"])
        seen = published.scan(snapshot_id=snap.snapshot_id).to_arrow()
        assert _by(seen, key) == _by(
            table.scan(snapshot=firn_snapshot, merged_only=True).to_arrow(), key
        ), f"Iceberg snapshot {snap.snapshot_id} (Firn {firn_snapshot})"


def _by(rows: pa.Table, key: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[c] for c in key): r for r in rows.to_pylist()}


def as_dict(rows: pa.Table, key: str) -> dict[Any, dict[str, Any]]:
    out = {}
    for row in rows.to_pylist():
        assert row[key] not in out, f"key {row[key]!r} appears twice"
        out[row[key]] = row
    return out
