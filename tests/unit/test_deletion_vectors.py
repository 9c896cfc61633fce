"""Deletion vectors on local storage: written and read back, applied to a base file's
batches across batch boundaries, and refused when they do not fit the base file; and
what a fold's result may claim about a base file it kept."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firn.engine.scan import scan_base
from firn.engine.vectors import _not_in, _replaced_rows
from firn.errors import CorruptFileError
from firn.io.deletion_vectors import SCHEMA, live_batches, read_positions, write_positions
from firn.io.integrity import read_matching
from firn.io.storage import Storage
from firn.model.files import DeletionVector, FileEntry
from firn.model.schema import TableSchema
from firn.model.tasks import InputFile, OutputFile, carries
from firn.model.tree import ROOT


def _batches(sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for n in sizes:
        out.append(pa.record_batch({"pos": pa.array(range(start, start + n), pa.int64())}))
        start += n
    return out


@settings(deadline=None)  # timing is not what this checks
@given(
    sizes=st.lists(st.integers(0, 7), min_size=1, max_size=6),
    picks=st.lists(st.integers(0, 41), max_size=20),
)
def test_live_batches_skip_exactly_the_hidden_positions(sizes: list[int], picks: list[int]) -> None:
    rows = sum(sizes)
    hidden = np.unique(np.array([p for p in picks if p < rows], dtype=np.int64))
    kept = [v for b in live_batches(_batches(sizes), hidden) for v in b.column(0).to_pylist()]
    assert kept == [i for i in range(rows) if i not in set(hidden.tolist())]


def test_a_vector_round_trips_through_storage(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    vector = write_positions(storage, "t/dv-1.parquet", [7, 3, 3, 0])
    assert vector.rows == 3, "repeats are one position"
    assert vector.size_bytes == (tmp_path / "t/dv-1.parquet").stat().st_size
    assert read_positions(storage, vector, base_rows=8).tolist() == [0, 3, 7]


@pytest.mark.parametrize(
    ("positions", "base_rows", "recorded_rows", "problem"),
    [
        ([0, 8], 8, 2, "outside the base file"),
        ([-1, 2], 8, 2, "outside the base file"),
        ([3, 1], 8, 2, "not ascending and unique"),
        ([2, 2], 8, 2, "not ascending and unique"),
        ([1, 2], 8, 3, "catalog says 3"),
    ],
)
def test_a_vector_that_does_not_fit_its_base_file_is_corrupt(
    tmp_path: Path, positions: list[int], base_rows: int, recorded_rows: int, problem: str
) -> None:
    storage = Storage(str(tmp_path))
    # Written raw: write_positions would sort and deduplicate.
    size = storage.write_parquet("dv.parquet", pa.table({"pos": positions}, schema=SCHEMA))
    vector = DeletionVector("dv.parquet", size, recorded_rows)
    with pytest.raises(CorruptFileError, match=problem) as caught:
        read_positions(storage, vector, base_rows)
    assert caught.value.path.endswith("dv.parquet")


def test_a_vector_takes_under_a_byte_per_hidden_row(tmp_path: Path) -> None:
    # A vector is rewritten whole at every fold that adds to it: its size is write
    # amplification. 30,000 of 250,000 rows hidden at random: plain or dictionary
    # pages under zstd take about 2.9 bytes a position, delta encoding about 0.7.
    storage = Storage(str(tmp_path))
    rng = np.random.default_rng(7)
    hidden = rng.choice(250_000, 30_000, replace=False)
    vector = write_positions(storage, "dv.parquet", hidden.tolist())
    assert vector.size_bytes < 30_000
    chunk = pq.ParquetFile(storage.full_path(vector.path)).metadata.row_group(0).column(0)
    assert "DELTA_BINARY_PACKED" in chunk.encodings
    assert read_positions(storage, vector, 250_000).tolist() == sorted(hidden.tolist())


def test_a_vector_of_the_wrong_size_is_corrupt(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    vector = write_positions(storage, "dv.parquet", [1, 2])
    with pytest.raises(CorruptFileError, match=r"the catalog says \d+"):
        read_positions(storage, DeletionVector(vector.path, vector.size_bytes + 1, 2), 8)


def _base_input(vector: DeletionVector | None = None) -> InputFile:
    return InputFile(7, "base/b.parquet", "B", 2, 1, 4, 1000, 100, [0], [99], vector)


def _kept(f: InputFile, vector: DeletionVector | None) -> OutputFile:
    return OutputFile(
        f.path, "B", 2, 1, 4, 1000, 100, [0], [99], deletion_vector=vector, replaces=f.file_id
    )


def test_a_result_may_keep_its_own_input_only_as_it_is() -> None:
    own = "base/p1-t2-a3/"
    old = DeletionVector("base/p0-t0-a1/dv-7.parquet", 50, 2)
    f = _base_input(old)
    grown = DeletionVector(own + "dv-7.parquet", 60, 5)
    assert carries(_kept(f, old), f, own), "kept as it was"
    assert carries(_kept(f, grown), f, own), "kept with a larger vector of its own"
    forged = [
        replace(_kept(f, grown), replaces=8),
        replace(_kept(f, grown), path="base/other.parquet"),
        replace(_kept(f, grown), record_count=101),
        replace(_kept(f, grown), max_key=[200]),
        _kept(f, None),  # drops the rows the old vector hid
        _kept(f, replace(grown, rows=2)),  # hides no more than before
        _kept(f, replace(grown, rows=101)),  # more rows than the file has
        _kept(f, replace(grown, path="base/p9-t9-a9/dv-7.parquet")),  # another attempt's
        _kept(f, replace(grown, path=own + "../p9/dv-7.parquet")),
    ]
    for output in forged:
        assert not carries(output, f, own), output
    assert _kept(f, grown).written_paths() == [grown.path], "never the base file itself"


KEY_SCHEMA = pa.schema(
    [pa.field("day", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False)]
)


@settings(deadline=None, max_examples=60)  # timing is not what this checks
@given(
    files=st.lists(st.lists(st.integers(0, 30), unique=True, max_size=12), min_size=1, max_size=4),
    changed=st.lists(st.integers(0, 30), unique=True, max_size=15),
    two_columns=st.booleans(),
)
def test_a_folds_lookup_finds_each_files_replaced_rows(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    changed: list[int],
    two_columns: bool,
) -> None:
    """One lookup for all of a task's base files gives each file the positions of its
    own rows whose key changed, as a lookup per file would: keys of one column (a set
    lookup) or two (a join), files empty or not."""
    storage = Storage(str(tmp_path_factory.mktemp("lookup")))
    key = ("day", "k") if two_columns else ("k",)
    table = TableSchema.build("t", KEY_SCHEMA if two_columns else KEY_SCHEMA.remove(0), key)

    def rows(keys: list[int]) -> pa.Table:
        columns = {"day": ["d"] * len(keys), "k": keys} if two_columns else {"k": keys}
        return pa.table(columns, schema=table.schema)

    inputs = []
    for n, keys in enumerate(files):
        path = f"base/B-{n}.parquet"
        size = storage.write_parquet(path, rows(keys))
        inputs.append(InputFile(n, path, "B", 1, 0, 1, size, len(keys)))
    found = _replaced_rows(storage, table, inputs, rows(changed))
    assert [p.tolist() for p in found] == [
        [i for i, k in enumerate(keys) if k in set(changed)] for keys in files
    ]


@settings(deadline=None)
@given(
    positions=st.lists(st.integers(0, 50), unique=True),
    hidden=st.lists(st.integers(0, 50), unique=True),
)
def test_positions_not_yet_hidden_are_a_set_difference(
    positions: list[int], hidden: list[int]
) -> None:
    a = np.array(sorted(positions), dtype=np.int64)
    b = np.array(sorted(hidden), dtype=np.int64)
    assert _not_in(a, b).tolist() == np.setdiff1d(a, b).tolist()


_KV = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


@settings(deadline=None, max_examples=80)  # timing is not what this checks
@given(
    rows=st.integers(1, 60),
    group=st.integers(1, 13),
    picks=st.lists(st.integers(0, 59), max_size=30),
    low=st.integers(-3, 62),
    span=st.integers(0, 20),
)
def test_a_filtered_read_of_a_file_with_a_vector_reads_only_the_row_groups_it_may_keep(
    tmp_path_factory: pytest.TempPathFactory,
    rows: int,
    group: int,
    picks: list[int],
    low: int,
    span: int,
) -> None:
    storage = Storage(str(tmp_path_factory.mktemp("dv")))
    base = pa.table({"k": range(rows), "v": [f"v{k}" for k in range(rows)]}, schema=_KV)
    pq.write_table(base, storage.full_path("b.parquet"), row_group_size=group)
    hidden = sorted({p for p in picks if p < rows})
    vector = write_positions(storage, "dv.parquet", hidden) if hidden else None
    size = os.path.getsize(storage.full_path("b.parquet"))
    entry = FileEntry(1, "", "base", "B", ROOT, 1, "b.parquet", size, rows, [0], [rows - 1], 1)
    entry = replace(entry, deletion_vector=vector)
    high = low + span
    keep = (pc.field("k") >= low) & (pc.field("k") <= high)

    read = scan_base(storage, TableSchema("t", _KV, ("k",)), [entry], keep).to_pylist()

    live = [k for k in range(rows) if k not in hidden and low <= k <= high]
    assert read == [{"k": k, "v": f"v{k}"} for k in live]
    if vector is not None:
        # The row groups read are exactly those whose keys meet the filter's range.
        _, spans = read_matching(storage, entry, ["k", "v"], keep)
        starts = range(0, rows, group)
        assert spans == [
            (s, min(group, rows - s)) for s in starts if s <= high and low < min(s + group, rows)
        ]
