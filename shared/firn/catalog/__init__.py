"""The system catalog in Postgres: tables, partitions, snapshots and files."""

from firn.catalog.catalog import Catalog, connect

__all__ = ["Catalog", "connect"]
