"""Firn: asynchronous compaction for primary-keyed lakehouse tables."""

from firn.errors import ConfigError, FirnError
from firn.settings import FirnSettings

__version__ = "0.1.0"

__all__ = ["ConfigError", "FirnError", "FirnSettings", "__version__"]
