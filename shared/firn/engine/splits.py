"""A split: one unit of a scan's work, self-contained, and how it is read.

A ``Split`` carries everything needed to read it anywhere: the table's location and
definition, its files (with sizes and record counts, checked while reading), each
partition's max_merged_seq, the bound filter and the columns. It pickles, and
reading it needs only pyarrow, numpy and the modules imported here (storage, the
merge rule, the filter form: no pydantic, Postgres or Kafka), so a Spark executor
can read it with Firn's code shipped as a zip.

Reading a merged split, with filter F (conjuncts K on key columns only, the rest R):

- base files are read through F: row groups F rules out are skipped, then rows.
  Safe for any F, because a base row never hides another row: it is either the
  answer for its key or replaced by a change row, which is read regardless;
- change files are read through K only. A change row may not be dropped for a
  non-key value: the newest upsert of a key, or its delete, decides the key even
  when an older version matched F. K holds for every row of a key or for none;
- after the merge, R is applied to the winners.

A change split (``Table.changes``) holds the change files committed in a snapshot
range and returns their rows as they are, with ``_op``, ``_seq`` and ``_ord``
(``read_changes``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from firn.engine.scan import project, read_inputs, scan_changes, unmerged_changes
from firn.io.integrity import check_sizes
from firn.io.storage import Storage
from firn.model.changes import DELETE, OP, ORD, UPSERT
from firn.model.files import FileEntry
from firn.model.filters import Filter, columns, conjunction, conjuncts, to_expression
from firn.model.keyhash import hash_keys
from firn.model.merge_on_read import SEQ, merge
from firn.model.schema import TableSchema
from firn.model.tree import Node

CHANGE_COLUMNS = (OP, SEQ, ORD)
"""What a change read adds to the table's columns: the operation and the LSN."""


@dataclass(frozen=True)
class Split:
    """One partition x hash node of a scan (or the whole scan, for ``to_arrow``)."""

    location: str
    """The table's storage root (a local path or a ``pyarrow.fs`` URI)."""
    table: TableSchema
    files: tuple[FileEntry, ...]
    merged_seqs: Mapping[str, int]
    """max_merged_seq of each partition of the split's snapshot."""
    columns: tuple[str, ...]
    """The table columns returned, in this order."""
    filter: Filter | None = None
    """Bound to the table's schema (``firn.model.filters.bind``)."""
    partition: str | None = None
    """The partition path (``""`` unpartitioned); ``None`` when several."""
    node: Node | None = None
    """The hash node every file of the split lies under; ``None`` when several."""
    changes: bool = False
    """A change split: the change rows themselves, not the merged view."""

    @property
    def rows(self) -> int:
        """Rows in the split's files (before merging and filtering)."""
        return sum(e.record_count for e in self.files)

    @property
    def bytes(self) -> int:
        return sum(e.size_bytes for e in self.files)

    @property
    def schema(self) -> pa.Schema:
        """The schema of what ``read`` returns."""
        return result_schema(self.table, self.columns, changes=self.changes)

    def read(self) -> pa.Table:
        return read_changes(self) if self.changes else read_merged(self)

    def parts(self) -> Iterator[pa.Table]:
        """What ``read`` returns, in parts: for a split with nothing to merge (only
        base files, as a compacted partition's are), each file's live rows, the next
        file read in a thread while the caller takes this one; else the whole split
        at once. A consumer that sends rows on (Spark's Python source, to the JVM)
        then reads and sends at the same time, holding two files, not the split."""
        merging = self.changes or unmerged_changes(self.files, self.merged_seqs)
        if merging or len(self.files) < 2:
            yield self.read()
            return
        alone = [dataclasses.replace(self, files=(e,)) for e in self.files]
        with ThreadPoolExecutor(1, thread_name_prefix="firn-split") as ahead:
            upcoming = ahead.submit(read_merged, alone[0])
            for following in alone[1:]:
                rows = upcoming.result()
                upcoming = ahead.submit(read_merged, following)
                yield rows
            yield upcoming.result()


def result_schema(table: TableSchema, names: Sequence[str], *, changes: bool) -> pa.Schema:
    fields = [table.schema.field(n) for n in names]
    if not changes:
        return pa.schema(fields)
    key = set(table.primary_key)
    # A delete row carries only its key: every other column is null there.
    fields = [f if f.name in key else f.with_nullable(True) for f in fields]
    extra = [
        pa.field(OP, pa.string(), False),
        pa.field(SEQ, pa.int64(), False),
        pa.field(ORD, pa.int64(), False),
    ]
    return pa.schema(fields + extra)


def _split_filter(split: Split) -> tuple[Filter | None, Filter | None]:
    """The filter as (conjuncts on key columns only, the rest)."""
    if not split.table.keyed:
        return split.filter, None  # no merge: every row is final
    key = set(split.table.primary_key)
    parts = conjuncts(split.filter)
    on_key = [p for p in parts if columns(p) <= key]
    rest = [p for p in parts if not columns(p) <= key]
    return conjunction(on_key), conjunction(rest)


def _read_table(split: Split) -> TableSchema:
    needed = set(split.columns) | set(split.table.primary_key)
    if split.filter is not None:
        needed |= columns(split.filter)
    return project(split.table, sorted(needed))


def read_merged(split: Split) -> pa.Table:
    """The merged view of the split's files, filtered and projected."""
    table = _read_table(split)
    schema = table.schema
    on_key, rest = _split_filter(split)
    everything = None if split.filter is None else to_expression(split.filter, schema)
    inputs = read_inputs(
        Storage(split.location),
        table,
        split.files,
        split.merged_seqs,
        base_filter=everything,
        change_filter=None if on_key is None else to_expression(on_key, schema),
    )
    merged = merge(
        table, inputs.base, _of_node(split, inputs.inserts), _of_node(split, inputs.deletes)
    )
    if rest is not None:
        merged = merged.filter(to_expression(rest, schema))
    return merged.select(list(split.columns))


def _of_node(split: Split, rows: pa.Table) -> pa.Table:
    """The change rows whose key hashes into the split's node, when the split shares
    shallower change files with its sibling nodes (``firn.engine.table_scan``: a
    small commit's files at the partition's root); otherwise every row already is."""
    node = split.node
    if node is None or not any(e.node.m < node.m for e in split.files) or not rows.num_rows:
        return rows
    hashes = hash_keys([rows.column(c) for c in split.table.primary_key])
    return rows.filter(pa.array(node.contains(hashes)))


def read_changes(split: Split) -> pa.Table:
    """The change rows of the split's files, in LSN order: upserts with their
    columns, deletes with their key (other columns null); the filter's key
    conjuncts apply to both, the rest to upserts only (a delete has no values)."""
    storage = Storage(split.location)
    table = _read_table(split)
    schema = table.schema
    on_key, _ = _split_filter(split)
    upserts = [e for e in split.files if e.file_type == "I"]
    deletes = [e for e in split.files if e.file_type == "D"]
    check_sizes(storage, [*upserts, *deletes])
    everything = None if split.filter is None else to_expression(split.filter, schema)
    key_only = None if on_key is None else to_expression(on_key, schema)
    inserted = _of_node(split, scan_changes(storage, table, upserts, "I", {}, everything))
    deleted = _of_node(split, scan_changes(storage, table, deletes, "D", {}, key_only))
    target = split.schema
    parts = []
    for rows, op in ((inserted, UPSERT), (deleted, DELETE)):
        columns_ = [
            rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
            for f in target
            if f.name != OP
        ]
        names = [f.name for f in target if f.name != OP]
        part = pa.table(columns_, names=names)
        part = part.append_column(OP, pa.array([op] * rows.num_rows, pa.string()))
        parts.append(part.select(target.names).cast(target))
    rows = pa.concat_tables(parts)
    order = pc.sort_indices(rows, sort_keys=[(SEQ, "ascending"), (ORD, "ascending")])
    return rows.take(order)
