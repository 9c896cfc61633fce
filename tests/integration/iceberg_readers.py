"""Reading a published Iceberg table with engines that hold no Firn code: pyiceberg
through the SQL catalog (with ``firn iceberg properties``), DuckDB through its
iceberg extension (loaded from the ``duckdb-extension-*`` wheels: DuckDB cannot
download extensions here)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table as IcebergTable

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
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        conn.execute(f"LOAD '{_extension(package)}'")
    return conn


def duckdb_rows(metadata_location: str, columns: str = "*") -> pa.Table:
    with duckdb_connection() as conn:
        return conn.execute(
            f"SELECT {columns} FROM iceberg_scan('{metadata_location}')"
        ).to_arrow_table()


def as_dict(rows: pa.Table, key: str) -> dict[Any, dict[str, Any]]:
    out = {}
    for row in rows.to_pylist():
        assert row[key] not in out, f"key {row[key]!r} appears twice"
        out[row[key]] = row
    return out
