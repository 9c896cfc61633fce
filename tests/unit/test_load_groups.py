"""Bulk-load grouping and sorting (``firn.engine.loading``): every row lands once, in
its partition and node, in key order; a repeated key is refused; hashing in slices
and writing a group one gathered row group at a time change nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import firn.engine.loading as loading
import firn.engine.writer as writer
from firn.engine.loading import group_rows, key_hashes, sorted_group, write_groups
from firn.errors import ConfigError
from firn.io.storage import Storage
from firn.model.keyhash import hash_keys, node_index
from firn.model.partition_names import partition_key, partition_keys
from firn.model.schema import TableSchema

ONE_KEY = TableSchema.build(
    "one", pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.string())]), ["id"], []
)
TWO_KEYS = TableSchema.build(
    "two",
    pa.schema(
        [
            pa.field("part", pa.string(), False),
            pa.field("k", pa.string(), False),
            pa.field("v", pa.int64()),
        ]
    ),
    ["part", "k"],
    ["part"],
)


@given(ids=st.lists(st.integers(-(2**40), 2**40), unique=True, max_size=200))
def test_one_integer_key_every_row_once_in_its_node_in_key_order(ids: list[int]) -> None:
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": [str(i) for i in ids]})
    groups = group_rows(ONE_KEY, 4, rows)
    seen: list[int] = []
    for group in groups:
        ordered = sorted_group(ONE_KEY, rows, group)
        got = ordered.column("id").to_pylist()
        assert got == sorted(got)
        assert ordered.column("v").to_pylist() == [str(i) for i in got], "rows stay whole"
        nodes = node_index(hash_keys([ordered.column("id")]), 4)
        assert set(nodes.tolist()) <= {group.node.i}
        seen += got
    assert sorted(seen) == sorted(ids)


@pytest.mark.parametrize(
    ("ids", "packed"),
    [
        ([5, 3, 9, 3, 1], True),  # packed with positions: one sort finds the repeat
        ([-(2**62), 7, 2**62, 7], False),  # a span too wide to pack: the general path
    ],
)
def test_a_repeated_integer_key_is_refused_naming_it(ids: list[int], packed: bool) -> None:
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": [str(i) for i in ids]})
    groups = group_rows(ONE_KEY, 2, rows)
    assert {g.packed is not None for g in groups} == {packed}
    repeated = next(
        g for g in groups if len(g.rows) > len(set(rows.take(g.rows)["id"].to_pylist()))
    )
    with pytest.raises(ConfigError, match=r"key \[(3|7)\] appears more than once"):
        sorted_group(ONE_KEY, rows, repeated)


@given(
    ids=st.lists(st.integers(0, 60), min_size=1, max_size=80),
    slice_rows=st.integers(1, 9),
)
def test_packed_keys_are_checked_for_repeats_across_slice_bounds(
    ids: list[int], slice_rows: int
) -> None:
    """The neighbour check runs a slice at a time: a repeat whose two rows meet across
    a slice's bound is found as surely as one within a slice."""
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": [str(i) for i in ids]})
    packing = loading.key_packing(ONE_KEY, rows)
    assert packing is not None
    low, bits = packing
    values = (np.array(ids, np.int64) - low).astype(np.uint64) << np.uint64(bits)
    values |= np.arange(len(ids), dtype=np.uint64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loading, "HASH_SLICE_ROWS", slice_rows)
        in_order = loading.KeyPositions(values, bits, low).ordered()
    if len(set(ids)) < len(ids):
        assert in_order is None
    else:
        assert in_order is not None
        assert [ids[p] for p in in_order.positions()] == sorted(ids)
        assert in_order.keys(0, len(ids)).tolist() == sorted(ids)


@given(
    ids=st.lists(st.integers(-128, 127), min_size=1, unique=True, max_size=100),
    key_type=st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64()]),
    chunk_rows=st.integers(1, 40),
)
def test_a_packed_key_column_comes_from_the_sort_exactly(
    ids: list[int], key_type: pa.DataType, chunk_rows: int
) -> None:
    """The key column of a table keyed by one integer column is unpacked from the
    sorted keys, not gathered: every width, negative keys, rows in several chunks."""
    schema = pa.schema([pa.field("id", key_type, False), pa.field("v", pa.string())])
    table = TableSchema.build("narrow", schema, ["id"], [])
    whole = pa.table({"id": pa.array(ids, key_type), "v": [f"v{i}" for i in ids]}, schema=schema)
    rows = pa.Table.from_batches(whole.to_batches(max_chunksize=chunk_rows), schema)
    seen = []
    for group in group_rows(table, 2, rows):
        assert group.packed is not None
        ordered = sorted_group(table, rows, group)
        assert ordered.schema == schema
        got = ordered.column("id").to_pylist()
        assert got == sorted(got)
        assert ordered.column("v").to_pylist() == [f"v{i}" for i in got], "rows stay whole"
        seen += got
    assert sorted(seen) == sorted(ids)


@given(
    ids=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, unique=True, max_size=60),
    chunk_rows=st.integers(1, 25),
)
def test_unpacked_keys_come_from_the_sort_exactly(ids: list[int], chunk_rows: int) -> None:
    """Integer keys too far apart to pack with a position, composite string keys and
    one short string key: the key columns the sort left in order are what a group's
    rows carry, in rows of several chunks."""
    wide = pa.table({"id": pa.array([*ids, -(2**63), 2**63 - 1], pa.int64())})
    wide = wide.group_by("id").aggregate([])  # the extremes once: nothing can pack
    wide = wide.append_column("v", pa.array([f"v{i}" for i in wide["id"].to_pylist()]))
    composite = pa.table(
        {
            "part": pa.array(["a" if i % 2 else "b" for i in ids], pa.string()),
            "k": pa.array([str(i) for i in ids], pa.string()),
            "v": pa.array(ids, pa.int64()),
        }
    )
    one_string = TableSchema.build(
        "one_string",
        pa.schema([pa.field("k", pa.string(), False), pa.field("v", pa.int64())]),
        ["k"],
        [],
    )
    # Short keys (9 to 15 bytes, most sharing their first eight): numpy sorts them.
    ranks = sorted(range(len(ids)), key=lambda i: ids[i])
    strings = pa.table(
        {
            "k": pa.array([f"{j:09d}{'x' * (j % 7)}" for j in ranks], pa.string()),
            "v": pa.array(ids, pa.int64()),
        }
    )
    cases = [
        (ONE_KEY, wide, ["id"]),
        (TWO_KEYS, composite, ["part", "k"]),
        (one_string, strings, ["k"]),
    ]
    for table, whole, key in cases:
        rows = pa.Table.from_batches(whole.to_batches(max_chunksize=chunk_rows), whole.schema)
        groups = group_rows(table, 2, rows)
        assert all(g.packed is None for g in groups)
        seen = []
        for group in groups:
            ordered = sorted_group(table, rows, group)
            got = list(zip(*(ordered.column(c).to_pylist() for c in key), strict=True))
            assert got == sorted(got)
            want = whole.take(
                pa.array(sorted(group.rows, key=lambda p: [whole[c][p].as_py() for c in key]))
            )
            assert ordered.to_pylist() == want.to_pylist(), "rows stay whole"
            seen += got
        assert len(seen) == whole.num_rows


def test_keys_are_packed_with_positions_only_when_their_span_leaves_room() -> None:
    narrow = pa.table({"id": pa.array([2**40, -(2**40), 0], pa.int64()), "v": ["a"] * 3})
    wide = pa.table({"id": pa.array([2**62, -(2**62), 0], pa.int64()), "v": ["a"] * 3})
    assert all(g.packed is not None for g in group_rows(ONE_KEY, 4, narrow))
    assert all(g.packed is None for g in group_rows(ONE_KEY, 4, wide))
    composite = pa.table({"part": ["a"], "k": ["b"], "v": pa.array([1], pa.int64())})
    assert all(g.packed is None for g in group_rows(TWO_KEYS, 4, composite))


@given(
    keys=st.lists(
        st.tuples(st.sampled_from(["a", "b/c", "ü"]), st.text(max_size=3)), unique=True, max_size=60
    )
)
def test_composite_keys_split_by_partition_and_node(keys: list[tuple[str, str]]) -> None:
    rows = pa.table(
        {
            "part": pa.array([p for p, _ in keys], pa.string()),
            "k": pa.array([k for _, k in keys], pa.string()),
            "v": pa.array(range(len(keys)), pa.int64()),
        }
    )
    seen = []
    for group in group_rows(TWO_KEYS, 2, rows):
        ordered = sorted_group(TWO_KEYS, rows, group)
        parts, ks = ordered.column("part").to_pylist(), ordered.column("k").to_pylist()
        pairs = list(zip(parts, ks, strict=True))
        assert pairs == sorted(pairs)
        assert {p for p, _ in pairs} == {group.partition_values["part"]}
        assert group.partition_key == partition_key(TWO_KEYS, {"part": pairs[0][0]})[0]
        seen += pairs
    assert sorted(seen) == sorted(keys)


@given(
    keys=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.text(max_size=12)), unique=True),
    slice_rows=st.integers(1, 7),
)
def test_hashing_in_slices_equals_hashing_at_once(
    keys: list[tuple[str, str]], slice_rows: int
) -> None:
    rows = pa.table(
        {
            "part": pa.array([p for p, _ in keys], pa.string()),
            "k": pa.array([k for _, k in keys], pa.string()),
            "v": pa.array(range(len(keys)), pa.int64()),
        }
    )
    whole = hash_keys([rows.column("part"), rows.column("k")]) if keys else []
    assert key_hashes(TWO_KEYS, rows, slice_rows).tolist() == list(whole)
    ids = pa.table({"id": pa.array([len(k) * 7919 - i for i, (_, k) in enumerate(keys)])})
    if keys:
        want = hash_keys([ids.column("id")]).tolist()
        assert key_hashes(ONE_KEY, ids, slice_rows).tolist() == want


@given(ids=st.lists(st.integers(-(2**40), 2**40), unique=True), slice_rows=st.integers(1, 7))
def test_splitting_by_node_in_slices_equals_splitting_at_once(
    ids: list[int], slice_rows: int
) -> None:
    """An unpartitioned table's rows are hashed and split by node slice by slice; each
    node's positions are those one split of all the hashes gives, ascending."""
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(["x"] * len(ids))})
    nodes = node_index(hash_keys([rows.column("id")]), 4) if ids else []
    want = [[i for i, n in enumerate(nodes) if n == node] for node in range(4)]
    got = loading._hashed_groups(ONE_KEY, rows, 4, slice_rows)
    assert [g.tolist() for g in got] == want


@pytest.mark.parametrize("packed", [True, False])
def test_a_group_written_one_row_group_at_a_time_is_its_sorted_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    # Small row groups and files, so that a group is gathered in many slices and cut
    # into several files: read back in file order, they are the group sorted by key.
    # Keys packed with their positions, and keys too far apart to pack: each slice's
    # key column is the sort's.
    monkeypatch.setattr(loading, "ROW_GROUP_ROWS", 37)
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 50)
    ids = [(i * 7_919) % 1_000 for i in range(1_000)]
    if not packed:
        ids += [-(2**63), 2**63 - 1]
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"value {i}" for i in ids]})
    storage = Storage(str(tmp_path))
    groups = group_rows(ONE_KEY, 2, rows)
    assert {g.packed is not None for g in groups} == {packed}
    files = write_groups(ONE_KEY, storage, "load", rows, groups, 2_048, threads=2)
    for group in groups:
        mine = sorted((f for f in files if f.node == group.node), key=lambda f: f.path)
        assert len(mine) > 1
        read = pa.concat_tables(storage.read_parquet(f.path) for f in mine)
        assert read.to_pylist() == sorted_group(ONE_KEY, rows, group).to_pylist()
        for f in mine:
            part = storage.read_parquet(f.path)
            assert f.record_count == part.num_rows
            assert f.min_key == [part.column("id")[0].as_py()]
            assert f.max_key == [part.column("id")[-1].as_py()]
            # A page index, for the readers that skip pages by it (Spark's).
            footer = pq.ParquetFile(storage.full_path(f.path)).metadata
            assert all(footer.row_group(0).column(c).has_column_index for c in range(2))


@given(
    chunks=st.lists(st.integers(0, 12), min_size=1, max_size=loading.FEW_CHUNKS + 8),
    positions=st.lists(st.integers(0, 10**6), max_size=60),
    null_every=st.sampled_from([0, 3, 7]),
)
def test_a_gather_takes_rows_of_several_chunks_in_the_order_asked(
    chunks: list[int], positions: list[int], null_every: int
) -> None:
    """A load's rows in several chunks (a big table, a Spark task's batches) come
    back in the order the positions ask, as one take of the whole table gives them:
    fixed-width columns (moved by numpy when they hold no null), strings, booleans,
    and columns with nulls (taken chunk by chunk, then put in order); a few chunks
    and more than ``FEW_CHUNKS`` (found by a search instead of comparisons)."""
    n = sum(chunks)
    whole = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "v": [f"v{i}" for i in range(n)],
            "small": pa.array([i % 100 for i in range(n)], pa.int8()),
            "price": pa.array(
                [i / 4 if not null_every or i % null_every else None for i in range(n)]
            ),
            "at": pa.array(range(n), pa.timestamp("us", "UTC")),
            "day": pa.array(range(n), pa.date32()),
            "flag": pa.array([i % 2 == 0 for i in range(n)]),
        }
    )
    starts = [sum(chunks[:n]) for n in range(len(chunks))]
    batches = [
        b
        for start, n in zip(starts, chunks, strict=True)
        for b in whole.slice(start, n).to_batches()
    ]
    rows = pa.Table.from_batches(batches, whole.schema)
    asked = np.array([p % len(whole) for p in positions] if len(whole) else [], np.int64)
    got = loading.Gather(rows).take(asked)
    assert got.to_pylist() == whole.take(pa.array(asked, pa.int64())).to_pylist()


@given(
    sizes=st.lists(
        st.one_of(st.integers(0, 3), st.integers(0, 40), st.integers(1000, 5000)),
        min_size=1,
        max_size=40,
    ).filter(lambda sizes: sum(sizes) > 0),
    picks=st.lists(st.integers(0, 10**9), min_size=1, max_size=200),
    runs_most=st.sampled_from([loading.CHUNK_INDEX_MOST, 4]),
)
def test_a_chunk_index_finds_the_chunk_of_every_position(
    sizes: list[int], picks: list[int], runs_most: int
) -> None:
    """Chunks of any sizes, empty ones among them (which hold no position), short
    ones after long ones (the runs are as short as the shortest chunk but the last),
    and a table that would need too many runs (found by a search instead)."""
    starts = np.cumsum([0, *sizes], dtype=np.int64)
    positions = np.array([p % int(starts[-1]) for p in picks], np.int64)
    original, loading.CHUNK_INDEX_MOST = loading.CHUNK_INDEX_MOST, runs_most
    try:
        index = loading.ChunkIndex(starts)
    finally:
        loading.CHUNK_INDEX_MOST = original
    want = [next(c for c in range(len(sizes)) if starts[c] <= p < starts[c + 1]) for p in positions]
    assert index.of(positions).tolist() == want


@pytest.mark.parametrize(
    ("table", "rows", "message"),
    [
        (ONE_KEY, pa.table({"id": [3, 1, 3], "v": ["x", "y", "z"]}), r"key \[3\] appears"),
        (
            TWO_KEYS,
            pa.table({"part": ["a", "a", "a"], "k": ["x", "y", "x"], "v": [1, 2, 3]}),
            r"key \['a', 'x'\] appears",
        ),
    ],
)
def test_a_repeated_key_is_refused(table: TableSchema, rows: pa.Table, message: str) -> None:
    (group,) = group_rows(table, 1, rows)
    with pytest.raises(ConfigError, match=message):
        sorted_group(table, rows, group)


def test_partition_names_by_key_or_mapping() -> None:
    assert partition_keys(TWO_KEYS, ["part=a", {"part": "a"}]) == {"part=a": {"part": "a"}}
    assert partition_key(TWO_KEYS, {"part": "b/c"}) == ("part=b%2Fc", {"part": "b/c"})
    assert partition_key(TWO_KEYS, "part=b%2Fc")[1] == {"part": "b/c"}
    for bad, message in [
        ("region=a", "must be written"),
        ("part=b/c", "must be written"),
        ({"region": "a"}, "every partition column"),
        (3, "name a partition"),
    ]:
        with pytest.raises(ConfigError, match=message):
            partition_key(TWO_KEYS, bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not partitioned"):
        partition_key(ONE_KEY, "id=1")
