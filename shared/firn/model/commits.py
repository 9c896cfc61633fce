"""A producer commit as data: the change files it wrote and what the catalog
allocated for it (SPEC 3)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from firn.model.tree import Node


@dataclass(frozen=True)
class StagedFile:
    """A written change file, ready to be registered by the catalog."""

    partition_key: str
    partition_values: dict[str, str]
    file_type: str
    node: Node
    path: str
    """Relative to the table's location."""
    size_bytes: int
    record_count: int
    min_key: list[Any] | None
    max_key: list[Any] | None


@dataclass(frozen=True)
class CommitResult:
    """What the catalog allocated for one commit."""

    seq: int
    snapshot_id: int
    committed_at: dt.datetime
