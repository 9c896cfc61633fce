"""Data files as the catalog records them: plain values the planner, the readers
and the catalog's queries pass around."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from firn.model.tree import Node

CODECS = ("lz4", "zstd", "snappy")
"""The Parquet codecs (LZ4_RAW, ZSTD, SNAPPY) a table's base files and merged runs
may be written with: its ``file.compression`` property."""
DEFAULT_CODEC = "lz4"


@dataclass(frozen=True)
class DeletionVector:
    """The rows of one base file a later compaction hid without rewriting the file
    (their keys were updated or deleted since): a Parquet file of their positions
    (``firn.io.deletion_vectors``), recorded on the base file's catalog row."""

    path: str
    """Relative to the table's location."""
    size_bytes: int
    rows: int
    """How many positions it holds: rows of the base file it hides."""

    @property
    def record_count(self) -> int:
        """The vector file's own rows (one per hidden position)."""
        return self.rows

    @classmethod
    def of(cls, data: Any) -> DeletionVector | None:
        """From its JSON form (a task spec's), or ``None``."""
        if data is None or isinstance(data, DeletionVector):
            return data
        return cls(str(data["path"]), int(data["size_bytes"]), int(data["rows"]))


@dataclass(frozen=True)
class FileEntry:
    """One data file as the catalog records it (design §2, file entry)."""

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
    deletion_vector: DeletionVector | None = None
    """Base files only: the rows compactions since hid (None: every row is live)."""
    key_spans: list[list[Any]] | None = None
    """Change files: ``[first, last, rows]`` of the runs its keys cluster in
    (``firn.model.keyspans``); None: only the range is known."""
    schema_id: int = 0
    """The schema version the file was written under (``firn.model.projection``)."""

    @property
    def live_rows(self) -> int:
        """Rows a read returns: all but those its deletion vector hides."""
        hidden = self.deletion_vector.rows if self.deletion_vector else 0
        return self.record_count - hidden
