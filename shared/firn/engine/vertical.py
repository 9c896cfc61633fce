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
row) and one group of its output rows, twice while the group is put in order, plus
the writer's row group; never whole rows of the whole task. Each input is opened once
per group, and every value is written and read once more through the spill file: a
vertical merge trades some time for memory that no longer grows with the width.
Major tasks only: a minor merge reads change files alone, which are small.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from firn.engine.inputs import POS, TaskInputs
from firn.engine.runs import DEL, SpillDir
from firn.engine.writer import SizedWriter
from firn.model.changes import ORD
from firn.model.keyorder import bound_scalars, count_below
from firn.model.merge_on_read import SEQ, latest_positions
from firn.model.tasks import InputFile

SOURCE = "_firn_source"
STITCH_ROWS = 65536
"""Rows of each group's spill batches, and so of each stitched batch."""


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
    paths = [
        _write_group(reader, sources, winners, group, edges, spill_dir, n)
        for n, group in enumerate(groups)
    ]
    _stitch(reader, winners, groups, paths, edges, cuts, writer)


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
    """Where the stitched batches start (and the last one ends): every
    ``STITCH_ROWS`` rows and at every cut, so that each cut falls between two."""
    return sorted({*range(0, rows, STITCH_ROWS), *cuts, rows})


def _write_group(
    reader: TaskInputs,
    sources: Sequence[InputFile],
    winners: pa.Table,
    group: Sequence[str],
    edges: Sequence[int],
    spill_dir: SpillDir,
    n: int,
) -> str:
    """One group's columns of every output row, in output order, in a spill file of
    one batch per pair of ``edges``; returns its path."""
    source = winners.column(SOURCE).to_numpy()
    position = winners.column(POS).to_numpy()
    # Output rows grouped by input, each input's in output order: every input is
    # read once, and one take per input gathers its winners.
    by_source = np.argsort(source, kind="stable")
    bounds = np.searchsorted(source[by_source], np.arange(len(sources) + 1))
    schema = reader.table.schema
    target = pa.schema([schema.field(c).with_nullable(True) for c in group])
    parts = [target.empty_table()]
    for i, f in enumerate(sources):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if lo < hi:
            rows = reader.whole(f, group).cast(target)
            parts.append(rows.take(pa.array(position[by_source[lo:hi]])))
            del rows
    gathered = pa.concat_tables(parts).combine_chunks()
    del parts
    in_output_order = np.empty_like(by_source)
    in_output_order[by_source] = np.arange(len(by_source))
    path = os.path.join(spill_dir.path, f"group-{n:05d}.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, target) as out:
        for lo, hi in itertools.pairwise(edges):
            out.write_table(gathered.take(pa.array(in_output_order[lo:hi])))
    return path


def _stitch(
    reader: TaskInputs,
    winners: pa.Table,
    groups: Sequence[Sequence[str]],
    paths: Sequence[str],
    edges: Sequence[int],
    cuts: set[int],
    writer: SizedWriter,
) -> None:
    """Whole rows, batch by batch, from the keys and every group's spill file."""
    key = list(reader.table.primary_key)
    names = reader.table.schema.names
    for n, columns in enumerate(_batches(paths, len(edges) - 1)):
        lo, hi = edges[n], edges[n + 1]
        if lo in cuts:
            writer.cut()
        found = dict(zip(key, winners.slice(lo, hi - lo).select(key).columns, strict=True))
        for group, batch in zip(groups, columns, strict=True):
            found.update(zip(group, batch.columns, strict=True))
        writer.write(pa.table([found[c] for c in names], names=names))


def _batches(paths: Sequence[str], count: int) -> Iterator[list[pa.RecordBatch]]:
    """Batch ``n`` of every spill file, for each ``n`` in turn. Plain file reads, not
    a memory map: mapped pages would count as the process's resident memory."""
    sources = [pa.OSFile(p, "rb") for p in paths]
    try:
        readers = [pa.ipc.open_file(s) for s in sources]
        for n in range(count):
            yield [r.get_batch(n) for r in readers]
    finally:
        for s in sources:
            s.close()
