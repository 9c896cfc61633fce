"""Firn: asynchronous compaction for primary-keyed lakehouse tables."""

from firn.api.catalog import Catalog, connect
from firn.api.compact import compact
from firn.api.table import Table
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
