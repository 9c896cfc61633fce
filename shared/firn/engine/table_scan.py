"""``Scan``: a planned read of one snapshot (or one snapshot range) of a table.

Planning happens when the scan is made, from the catalog's file list alone: files
are pruned (``firn.engine.pruning``) and the rest grouped into splits
(``firn.engine.splits``). Nothing is read until a result is asked for:

- ``to_arrow()`` reads every kept file in one pass (one dataset scan per file
  type, parallel with read-ahead) and merges once: the fastest way to a table
  that fits in memory;
- ``to_batches()`` reads split by split, so memory holds one split at a time;
- ``splits()`` hands the splits out, for a caller that reads them elsewhere;
- ``explain()`` says what was kept and pruned, and why.

Splits of a keyed table are the nodes of one tree level per partition: the
shallowest level among the partition's kept files other than change files at its
root, so every other file belongs to exactly one split (a deeper file to its
ancestor) and is read once; a root change file goes to every split of its
partition, and each keeps only the rows whose key hashes into its node. The keys
of two splits never meet, so the splits' merged views add up to the table's. Tables
without a key need no merge, and every file is a split of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from firn.engine.pruning import (
    MERGED,
    PARTITION,
    KeyRouter,
    partitions_passing,
    routed_keys,
)
from firn.engine.scan import unmerged_changes
from firn.engine.splits import Split, result_schema
from firn.errors import ConfigError
from firn.model.files import FileEntry
from firn.model.filters import Filter, columns, conjuncts, to_expression
from firn.model.schema import TableSchema
from firn.model.tree import ROOT, Node


@dataclass(frozen=True)
class ScanReport:
    """What a scan reads and what it skipped (``Scan.explain``)."""

    snapshot: int
    """The snapshot read (for a change scan: the end of the range)."""
    filter: str | None
    columns: tuple[str, ...]
    files: int
    """Files of the snapshot (or range) before pruning."""
    bytes: int
    files_kept: int
    bytes_kept: int
    rows_kept: int
    """Rows in the kept files (before merging and filtering)."""
    pruned: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Files and bytes skipped, by reason: ``merged``, ``partition``, ``key node``,
    ``key range``."""
    splits: int = 0
    routed_keys: int | None = None
    """How many whole keys the filter pins (None: it pins none)."""
    change_filter: str | None = None
    """The part of the filter pushed into change files (key columns only)."""
    after_merge: str | None = None
    """The part applied to merged rows (the rest)."""
    start_snapshot: int | None = None
    """For a change scan: the range is (start_snapshot, snapshot]."""

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["pruned"] = {k: {"files": f, "bytes": b} for k, (f, b) in self.pruned.items()}
        return out

    def __str__(self) -> str:
        head = (
            f"changes in snapshots ({self.start_snapshot}, {self.snapshot}]"
            if self.start_snapshot is not None
            else f"scan of snapshot {self.snapshot}"
        )
        lines = [
            head,
            f"  filter:         {self.filter or '(none)'}",
            f"  columns:        {', '.join(self.columns)}",
            f"  files:          {self.files_kept} of {self.files} kept, "
            f"{self.bytes_kept:,} of {self.bytes:,} bytes, {self.rows_kept:,} rows",
        ]
        for reason, (files, size) in sorted(self.pruned.items()):
            lines.append(f"  pruned ({reason}): {files} files, {size:,} bytes")
        if self.routed_keys is not None:
            lines.append(f"  routed keys:    {self.routed_keys}")
        if self.filter is not None and self.start_snapshot is None:
            lines.append(f"  change files:   {self.change_filter or '(read whole)'}")
            lines.append(f"  after merge:    {self.after_merge or '(nothing left)'}")
        elif self.filter is not None:
            lines.append(f"  all rows:       {self.change_filter or '(no condition)'}")
            lines.append(f"  upserts only:   {self.after_merge or '(no condition)'}")
        lines.append(f"  splits:         {self.splits}")
        return "\n".join(lines)


def check_columns(table: TableSchema, names: Sequence[str] | None) -> tuple[str, ...]:
    """The requested columns, checked; every table column when ``None``."""
    if names is None:
        return tuple(table.schema.names)
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ConfigError("columns must be a list of column names")
    listed = tuple(names)
    unknown = [n for n in listed if n not in table.schema.names]
    if unknown:
        raise ConfigError(f"unknown columns {unknown}; the table has {table.schema.names}")
    if not listed or len(set(listed)) != len(listed):
        raise ConfigError(f"columns must name distinct columns, at least one: {list(listed)}")
    return listed


class Scan:
    """A planned scan; see the module doc. Made by ``Table.scan`` / ``Table.changes``."""

    def __init__(
        self,
        location: str,
        table: TableSchema,
        snapshot: int,
        entries: Sequence[FileEntry],
        merged_seqs: Mapping[str, int],
        filter: Filter | None = None,
        columns: tuple[str, ...] | None = None,
        *,
        start_snapshot: int | None = None,
    ) -> None:
        self.location = location
        self.table = table
        self.snapshot = snapshot
        self.filter = filter
        self.columns = columns or tuple(table.schema.names)
        self.merged_seqs = dict(merged_seqs)
        self.changes = start_snapshot is not None
        self.start_snapshot = start_snapshot
        self._entries = list(entries)
        self._kept, self._pruned, self._routed = self._prune()
        self._splits = self._group()

    @property
    def schema(self) -> pa.Schema:
        """The schema of every result (a change scan adds ``_op``, ``_seq``, ``_ord``)."""
        return result_schema(self.table, self.columns, changes=self.changes)

    # -- planning -----------------------------------------------------------------

    def _prune(self) -> tuple[list[FileEntry], dict[str, list[FileEntry]], int | None]:
        pruned: dict[str, list[FileEntry]] = {}
        live = self._entries
        if not self.changes:
            unmerged = {id(e) for e in unmerged_changes(live, self.merged_seqs)}
            pruned[MERGED] = [e for e in live if e.store == "change" and id(e) not in unmerged]
            live = [e for e in live if e.store == "base" or id(e) in unmerged]
        if self.filter is None:
            return live, pruned, None
        expression = to_expression(self.filter, self.table.schema)
        passing = partitions_passing(self.table, {e.partition_key for e in live}, expression)
        pruned[PARTITION] = [e for e in live if e.partition_key not in passing]
        live = [e for e in live if e.partition_key in passing]
        keys = routed_keys(self.filter, self.table)
        if keys is None:
            return live, pruned, None
        router = KeyRouter.build(self.table, keys)
        kept = []
        for entry in live:
            reason = router.why_not(entry, self.table.key_schema)
            if reason is None:
                kept.append(entry)
            else:
                pruned.setdefault(reason, []).append(entry)
        return kept, pruned, len(keys)

    def _group(self) -> list[Split]:
        if not self.table.keyed:
            return [self._split([e], e.partition_key, ROOT) for e in self._kept]
        by_partition: dict[str, list[FileEntry]] = {}
        for entry in self._kept:
            by_partition.setdefault(entry.partition_key, []).append(entry)
        splits = []
        for partition, entries in sorted(by_partition.items()):
            shared = [e for e in entries if _shared(e)]
            own = [e for e in entries if not _shared(e)]
            if not own:  # only root files: the partition is one split
                own, shared = shared, []
            level = min(e.node.m for e in own)
            by_node: dict[Node, list[FileEntry]] = {}
            if shared:  # every node of the level may hold some of the shared rows
                by_node = {Node(level, i): [] for i in range(level)}
            for entry in own:
                by_node.setdefault(entry.node.ancestor_at(level), []).append(entry)
            for node, files in sorted(by_node.items()):
                splits.append(self._split([*files, *shared], partition, node))
        return splits

    def _split(self, files: Sequence[FileEntry], partition: str | None, node: Node | None) -> Split:
        seqs = {e.partition_key: self.merged_seqs.get(e.partition_key, 0) for e in files}
        return Split(
            location=self.location,
            table=self.table,
            files=tuple(files),
            merged_seqs=seqs,
            columns=self.columns,
            filter=self.filter,
            partition=partition,
            node=node,
            changes=self.changes,
        )

    # -- results ------------------------------------------------------------------

    def splits(self) -> list[Split]:
        """The units of parallel work: one per partition x hash node (per file for
        a table without a key); each is read with ``split.read()``."""
        return list(self._splits)

    def to_arrow(self) -> pa.Table:
        """Every row the scan selects, as one table (row order unspecified; a
        change scan is in commit order: ``_seq``, then ``_ord``)."""
        if not self._kept:
            return self.schema.empty_table()
        whole = self._split(self._kept, None, None)
        return whole.read()

    def to_batches(self) -> pa.RecordBatchReader:
        """The rows as a stream, read split by split (memory: one split)."""
        return pa.RecordBatchReader.from_batches(self.schema, self._stream())

    def _stream(self) -> Iterator[pa.RecordBatch]:
        for split in self._splits:
            yield from split.read().to_batches()

    def explain(self) -> ScanReport:
        """What is read and what was pruned, by reason; print it for a summary."""
        total = self._entries
        kept = self._kept
        on_key, rest = _filter_parts(self.table, self.filter)
        return ScanReport(
            snapshot=self.snapshot,
            filter=None if self.filter is None else str(self.filter),
            columns=self.columns,
            files=len(total),
            bytes=sum(e.size_bytes for e in total),
            files_kept=len(kept),
            bytes_kept=sum(e.size_bytes for e in kept),
            rows_kept=sum(e.record_count for e in kept),
            pruned={
                reason: (len(files), sum(e.size_bytes for e in files))
                for reason, files in self._pruned.items()
                if files
            },
            splits=len(self._splits),
            routed_keys=self._routed,
            change_filter=on_key,
            after_merge=rest,
            start_snapshot=self.start_snapshot,
        )


def _shared(entry: FileEntry) -> bool:
    """A change file at a partition's root node: given to every split of its
    partition, each of which keeps the rows of its own node, rather than making the
    partition one split until compaction folds it. Such files are small commits'
    (``change.split-rows``) or tables with one change bucket, whose change files
    compaction keeps small."""
    return entry.store == "change" and entry.node.m == 1


def _filter_parts(table: TableSchema, f: Filter | None) -> tuple[str | None, str | None]:
    parts = conjuncts(f)
    if not table.keyed:
        return (" AND ".join(map(str, parts)) or None), None
    key = set(table.primary_key)
    on_key = [str(p) for p in parts if columns(p) <= key]
    rest = [str(p) for p in parts if not columns(p) <= key]
    return " AND ".join(on_key) or None, " AND ".join(rest) or None
