"""Firn: asynchronous compaction for primary-keyed lakehouse tables."""

from firn.catalog import Catalog, connect
from firn.compaction.compact import compact
from firn.errors import (
    CommitError,
    CommitStateUnknownError,
    ConfigError,
    CorruptFileError,
    FirnError,
    SnapshotExpiredError,
    StorageError,
)
from firn.settings import FirnSettings
from firn.table.table import Table

__version__ = "0.1.0"

__all__ = [
    "Catalog",
    "CommitError",
    "CommitStateUnknownError",
    "ConfigError",
    "CorruptFileError",
    "FirnError",
    "FirnSettings",
    "SnapshotExpiredError",
    "StorageError",
    "Table",
    "__version__",
    "compact",
    "connect",
]
