"""The vertical merge: a wide table's major task, column group by column group.

A row-wise merge (``firn.engine.kernel``) moves whole rows through every stage: each
batch it reads, sorts and buffers is as wide as the table, so a table of 200 value
columns holds 200 columns of every row in flight. Doris's vertical compaction (seed
002) splits the work by columns instead, and so does this merge:

1. **Keys.** Only the key columns (and a change row's ``_seq`` and ``_ord``) of every
   input are read, each row tagged with its input and its position in that file. The
   kernel's rule picks each key's winner (greatest LSN; base rows are LSN 0) and drops
   winning deletes. What is left is the output's row order: for each output row, the
   input and position it comes from.
2. **Value columns, a group at a time.** For each group of ``TaskSpec.vertical_group``
   value columns, every input's group columns are read (nothing else of the file),
   the winners' positions taken from them and put in output order; the group is
   written to a local spill file (Arrow IPC) in fixed batches.
3. **Stitch.** Batch by batch, the keys and each group's batch make whole rows, which
   the sized writer writes as the row-wise merge does: key-sorted, cut at
   ``target-file-size`` and before the files the task leaves untouched.

A task's peak memory is therefore its keys (the key columns plus three integers a
row), two groups of its inputs' rows (the next group is read while one is put in
order), one group of its output rows and the writer's row group; never whole rows of
the whole task. Each input is opened once per group (its footer decoded once), and
every value is written and read once more through the spill file; in return, no
stage sorts or copies whole rows.
Major tasks only: a minor merge reads change files alone, which are small.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from firn.engine.inputs import POS, TaskInputs
from firn.engine.runs import DEL, SpillDir
from firn.engine.writer import ROW_GROUP_BYTES, SizedWriter
from firn.model.changes import ORD
from firn.model.keyorder import bound_scalars, count_below
from firn.model.merge_on_read import SEQ, latest_positions
from firn.model.tasks import InputFile

SOURCE = "_firn_source"
SPILL_ROWS = 8192
"""Rows of each group's spill batches; a stitched batch joins as many as make about a
writer's row group (``ROW_GROUP_BYTES``) of whole rows, never across a cut."""


def merge_vertical(
    reader: TaskInputs, base_files: Sequence[InputFile], writer: SizedWriter, spill_dir: SpillDir
) -> None:
    """Merge the task's changes into ``base_files`` (see the module doc) and write the
    live rows with ``writer``."""
    reader.forget_held()
    table = reader.table
    sources = [*base_files, *reader.spec.change_files]
    winners = _winners(reader, sources)
    if winners.num_rows == 0:
        return
    values = [c for c in table.schema.names if c not in table.primary_key]
    step = max(1, reader.spec.vertical_group)
    groups = [values[i : i + step] for i in range(0, len(values), step)]
    cuts = _cuts(reader, winners)
    edges = _edges(winners.num_rows, cuts)
    used, rows = _read_from(sources, winners)
    inputs = [sources[i] for i in used]
    paths, row_bytes = [], winners.nbytes / winners.num_rows
    # The next group is read (file reads and decoding, outside the GIL) while this
    # one is put in order and spilled: one more group's input in memory.
    with ThreadPoolExecutor(1, thread_name_prefix="firn-vertical") as ahead:
        upcoming = ahead.submit(_read_group, reader, inputs, groups[0]) if groups else None
        for n in range(len(groups)):
            assert upcoming is not None
            read = upcoming.result()
            if n + 1 < len(groups):
                upcoming = ahead.submit(_read_group, reader, inputs, groups[n + 1])
            path, group_bytes = _write_group(read, rows, edges, spill_dir, n)
            del read
            paths.append(path)
            row_bytes += group_bytes
    per_batch = max(1, int(ROW_GROUP_BYTES // (row_bytes * SPILL_ROWS)))
    spans = _stitched(edges, cuts, per_batch)
    _stitch(reader, winners, groups, paths, edges, spans, cuts, writer)


def _winners(reader: TaskInputs, sources: Sequence[InputFile]) -> pa.Table:
    """The live rows' keys in key order, each with the input (``SOURCE``, an index
    into ``sources``) and position (``POS``) its values are read from."""
    key = list(reader.table.primary_key)
    parts = []
    for n, f in enumerate(sources):
        change = f.file_type != "B"
        columns = [*key, ORD, SEQ] if change else key
        for rows in reader.batches(f, columns, positions=True):
            rows = reader.keep(f, reader.planned(f, rows) if change else rows)
            if rows.num_rows:
                parts.append(_tagged(rows, key, n, change and f.file_type == "D"))
    if not parts:
        return pa.table({})
    rows = pa.concat_tables(parts).combine_chunks()
    del parts
    seq = rows.column(SEQ).to_numpy()
    ord_ = rows.column(ORD).to_numpy()
    rows = rows.take(latest_positions(rows.select(key), seq, ord_))
    deleted = rows.column(DEL).to_numpy(zero_copy_only=False)
    if deleted.any():
        rows = rows.filter(pa.array(~deleted))
    return rows.select([*key, SOURCE, POS])


def _tagged(rows: pa.Table, key: Sequence[str], source: int, deleted: bool) -> pa.Table:
    """Key columns, LSN (a base row's is 0, 0), delete flag, source and position."""
    n = rows.num_rows
    zero = pa.array(np.zeros(n, np.int64))
    lsn = [rows.column(c).cast(pa.int64()) if c in rows.column_names else zero for c in (SEQ, ORD)]
    return pa.table(
        [
            *(rows.column(c) for c in key),
            *lsn,
            pa.array(np.full(n, deleted)),
            pa.array(np.full(n, source, np.int32)),
            rows.column(POS),
        ],
        names=[*key, SEQ, ORD, DEL, SOURCE, POS],
    )


def _cuts(reader: TaskInputs, winners: pa.Table) -> set[int]:
    """The output rows the task's ``cut_before`` keys fall before (no output file
    may span one: the files the task leaves untouched start there)."""
    key = list(reader.table.primary_key)
    key_schema = reader.table.key_schema
    return {count_below(winners, key, bound_scalars(c, key_schema)) for c in reader.spec.cut_before}


def _edges(rows: int, cuts: set[int]) -> list[int]:
    """Where the spill batches start (and the last one ends): every ``SPILL_ROWS``
    rows and at every cut, so that each cut falls between two."""
    return sorted({*range(0, rows, SPILL_ROWS), *cuts, rows})


def _stitched(edges: Sequence[int], cuts: set[int], per_batch: int) -> list[tuple[int, int]]:
    """Which spill batches each stitched batch joins, as (first, end): ``per_batch``
    at most, and a new stitched batch at every cut."""
    batches = len(edges) - 1
    spans, first = [], 0
    for n in range(1, batches):
        if n - first == per_batch or edges[n] in cuts:
            spans.append((first, n))
            first = n
    if first < batches:
        spans.append((first, batches))
    return spans


def _read_from(sources: Sequence[InputFile], winners: pa.Table) -> tuple[list[int], pa.Array]:
    """The inputs any output row comes from (indexes into ``sources``), and each
    output row's index into those inputs' rows laid end to end."""
    source = winners.column(SOURCE).to_numpy()
    position = winners.column(POS).to_numpy()
    used = [int(i) for i in np.flatnonzero(np.bincount(source, minlength=len(sources)))]
    counts = np.array([sources[i].record_count for i in used], np.int64)
    offset = np.zeros(len(sources), np.int64)
    offset[used] = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return used, pa.array(offset[source] + position)


def _read_group(reader: TaskInputs, inputs: Sequence[InputFile], group: Sequence[str]) -> pa.Table:
    """The group's columns of every row of ``inputs``, laid end to end."""
    schema = reader.table.schema
    target = pa.schema([schema.field(c).with_nullable(True) for c in group])
    return pa.concat_tables(
        [target.empty_table(), *(reader.whole(f, group).cast(target) for f in inputs)]
    )


def _write_group(
    read: pa.Table, rows: pa.Array, edges: Sequence[int], spill_dir: SpillDir, n: int
) -> tuple[str, float]:
    """The rows of ``read`` at ``rows`` (one group's columns of every output row, in
    output order) in a spill file of one batch per pair of ``edges``; returns its
    path and the group's Arrow bytes a row."""
    # One take over the inputs' chunks: Arrow joins the chunks once per call, so
    # one call for the group, not one per batch.
    gathered = read.take(rows)
    path = os.path.join(spill_dir.path, f"group-{n:05d}.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, gathered.schema) as out:
        for lo, hi in itertools.pairwise(edges):
            out.write_table(gathered.slice(lo, hi - lo))
    return path, gathered.nbytes / max(1, gathered.num_rows)


def _stitch(
    reader: TaskInputs,
    winners: pa.Table,
    groups: Sequence[Sequence[str]],
    paths: Sequence[str],
    edges: Sequence[int],
    spans: Sequence[tuple[int, int]],
    cuts: set[int],
    writer: SizedWriter,
) -> None:
    """Whole rows, a stitched batch at a time, from the keys and every group's
    spill file."""
    key = list(reader.table.primary_key)
    names = reader.table.schema.names
    for (first, end), columns in zip(spans, _batches(paths, spans), strict=True):
        lo, hi = edges[first], edges[end]
        if lo in cuts:
            writer.cut()
        found = dict(zip(key, winners.slice(lo, hi - lo).select(key).columns, strict=True))
        for group, batch in zip(groups, columns, strict=True):
            found.update(zip(group, batch.columns, strict=True))
        writer.write(pa.table([found[c] for c in names], names=names))


def _batches(paths: Sequence[str], spans: Sequence[tuple[int, int]]) -> Iterator[list[pa.Table]]:
    """For each span, its spill batches of every spill file, one table per file.
    Plain file reads, not a memory map: mapped pages would count as the process's
    resident memory."""
    sources = [pa.OSFile(p, "rb") for p in paths]
    try:
        readers = [pa.ipc.open_file(s) for s in sources]
        for first, end in spans:
            yield [
                pa.Table.from_batches([r.get_batch(n) for n in range(first, end)]) for r in readers
            ]
    finally:
        for s in sources:
            s.close()
