"""Firn: asynchronous compaction for primary-keyed lakehouse tables.

The public names below are loaded on first use (PEP 562), not when ``firn`` is
imported: Spark's Python workers import ``firn.engine.*`` from a shipped zip
(``firn.engine.shipping``) and have neither the catalog's nor Kafka's client
libraries, so importing the package itself must not pull in the API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from firn.api.catalog import Catalog, connect
    from firn.api.compact import compact
    from firn.api.table import Table
    from firn.errors import (
        AccessDeniedError,
        CommitError,
        CommitStateUnknownError,
        ConfigError,
        CorruptFileError,
        FirnError,
        SnapshotExpiredError,
        StorageError,
    )
    from firn.model.commits import Committed, Stall
    from firn.settings import FirnSettings

__version__ = "0.1.0"

_LAZY = {
    "Catalog": "firn.api.catalog",
    "connect": "firn.api.catalog",
    "compact": "firn.api.compact",
    "Table": "firn.api.table",
    "Committed": "firn.model.commits",
    "Stall": "firn.model.commits",
    "AccessDeniedError": "firn.errors",
    "CommitError": "firn.errors",
    "CommitStateUnknownError": "firn.errors",
    "ConfigError": "firn.errors",
    "CorruptFileError": "firn.errors",
    "FirnError": "firn.errors",
    "SnapshotExpiredError": "firn.errors",
    "StorageError": "firn.errors",
    "FirnSettings": "firn.settings",
}

__all__ = [
    "AccessDeniedError",
    "Catalog",
    "CommitError",
    "CommitStateUnknownError",
    "Committed",
    "ConfigError",
    "CorruptFileError",
    "FirnError",
    "FirnSettings",
    "SnapshotExpiredError",
    "Stall",
    "StorageError",
    "Table",
    "__version__",
    "compact",
    "connect",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'firn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
