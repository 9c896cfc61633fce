"""Data files as the catalog records them: plain values the planner, the readers
and the catalog's queries pass around."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from firn.model.tree import Node


@dataclass(frozen=True)
class FileEntry:
    """One data file as the catalog records it (SPEC 2, file entry)."""

    file_id: int
    partition_key: str
    store: str
    """``change`` or ``base``."""
    file_type: str
    """``I`` insert, ``D`` delete (change store) or ``B`` base."""
    node: Node
    seq: int
    path: str
    """Relative to the table's location."""
    size_bytes: int
    record_count: int
    min_key: list[Any] | None
    max_key: list[Any] | None
    added_snapshot: int
