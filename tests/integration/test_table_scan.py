"""``Table.scan`` and ``Table.changes`` on the real catalog, against the reference
model: random change sets (same-commit delete-then-insert included), compactions
and bucket changes in between, random filters in every form; filtered scans equal
filtering the full read, splits add up to the whole, and pruning really prunes."""

from __future__ import annotations

import itertools
import pickle
import re
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import firn
from firn.engine.pruning import KEY_NODE, KEY_RANGE, PARTITION
from firn.model.filters import And, Compare, Filter, In, IsNull, Not, Or, bind, to_expression
from firn.model.keyhash import hash_keys
from tests.changesets import (
    KEY_KINDS,
    LEVELS,
    PARTS,
    KeyKind,
    ReferenceModel,
    Row,
    Step,
    as_change_set,
    as_view,
    evolving_table,
    operations,
    table_schema,
)
from tests.hash_tree import HASH_TREE

_names = itertools.count()
OPS = ["=", "!=", "<", "<=", ">", ">="]


def filters(kind: KeyKind) -> st.SearchStrategy[Filter]:
    """Filters over every column: key point lookups, ranges, nulls, AND/OR/NOT."""
    part = st.sampled_from(PARTS)
    key = st.integers(0, 15).map(kind.value)
    some_keys = st.lists(key, min_size=1, max_size=3).map(tuple)
    leaves = st.one_of(
        st.builds(Compare, st.just("part"), st.sampled_from(OPS), part),
        st.builds(Compare, st.just("k"), st.sampled_from(OPS), key),
        st.builds(In, st.just("k"), some_keys),
        st.builds(Compare, st.just("qty"), st.sampled_from(OPS), st.integers(-(2**40), 2**40)),
        st.builds(IsNull, st.sampled_from(["qty", "label", "price"]), st.booleans()),
        st.builds(Compare, st.just("label"), st.sampled_from(OPS), st.text(max_size=3)),
        st.builds(
            Compare,
            st.just("price"),
            st.sampled_from(OPS),
            st.floats(allow_nan=False, allow_infinity=False, width=32),
        ),
    )
    point = st.builds(lambda p, ks: And((Compare("part", "=", p), In("k", ks))), part, some_keys)
    return st.recursive(
        leaves | point | point,
        lambda inner: st.one_of(
            st.builds(lambda a, b: And((a, b)), inner, inner),
            st.builds(lambda a, b: Or((a, b)), inner, inner),
            st.builds(Not, inner),
        ),
        max_leaves=5,
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[KeyKind, dict[str, Any], bool, list[Step], list[Filter]]:
    kind = draw(st.sampled_from(KEY_KINDS))
    properties, steps = draw(evolving_table(kind))
    chosen = draw(st.lists(filters(kind), min_size=1, max_size=3))
    return kind, properties, draw(st.booleans()), steps, chosen


def rows_of(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in table.to_pylist())


def check_scan(table: firn.Table, snapshot: int, f: Filter, columns: list[str]) -> None:
    """Every way of reading ``f`` agrees with filtering the full read."""
    full = table.read(snapshot=snapshot)
    bound = bind(f, table.schema)
    expected = full.filter(to_expression(bound, table.schema))
    scan = table.scan(filter=f, snapshot=snapshot)
    got = scan.to_arrow()
    assert got.schema == table.schema
    assert as_view(got) == as_view(expected), f"filter {bound}"
    # The string form of the same filter reads the same rows.
    assert as_view(table.scan(filter=str(bound), snapshot=snapshot).to_arrow()) == as_view(expected)
    # So does the pyarrow expression (opaque: no key routing, same rows).
    as_arrow = table.scan(filter=to_expression(bound, table.schema), snapshot=snapshot)
    assert as_view(as_arrow.to_arrow()) == as_view(expected)
    # Splits, read one by one after a pickle round trip, add up to the whole;
    # so does the stream.
    splits = [pickle.loads(pickle.dumps(s)) for s in scan.splits()]
    parts = [s.read() for s in splits]
    assert rows_of(pa.concat_tables([got.schema.empty_table(), *parts])) == rows_of(got)
    # Read in parts (a file at a time where a split has nothing to merge), the same.
    streamed = [p for s in splits for p in s.parts()]
    assert rows_of(pa.concat_tables([got.schema.empty_table(), *streamed])) == rows_of(got)
    assert rows_of(scan.to_batches().read_all()) == rows_of(got)
    # A projection returns the same rows' columns.
    projected_scan = table.scan(filter=f, columns=columns, snapshot=snapshot)
    projected = projected_scan.to_arrow()
    assert projected.column_names == columns
    assert rows_of(projected) == rows_of(expected.select(columns))
    in_parts = [p for s in projected_scan.splits() for p in s.parts()]
    assert all(p.column_names == columns for p in in_parts)
    assert rows_of(pa.concat_tables([projected.schema.empty_table(), *in_parts])) == rows_of(
        projected
    )


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    scenario=scenarios(),
    columns=st.lists(st.sampled_from(["qty", "k", "label", "part"]), min_size=1, unique=True),
)
def test_filtered_scans_equal_filtering_the_full_read(
    shared_catalog: firn.Catalog,
    scenario: tuple[KeyKind, dict[str, Any], bool, list[Step], list[Filter]],
    columns: list[str],
) -> None:
    kind, properties, partitioned, steps, chosen = scenario
    schema = table_schema(kind)
    table = shared_catalog.create_table(
        f"scan_{next(_names)}", schema, ["part", "k"], ["part"] if partitioned else [], properties
    )
    model = ReferenceModel()
    snapshots = []
    for action, arg in steps:
        if action == "commit":
            table.commit(as_change_set(arg, schema))
            model.apply(arg)
        elif action == "buckets":
            table.set_properties({"change.buckets": arg[0], "base.buckets": arg[1]})
        else:
            summary = firn.compact(table, kind=arg[0], engine=arg[1])
            assert summary["failed_attempts"] == 0, summary["errors"]
        snapshots.append((table.current_snapshot(), model.view()))
    for snapshot, view in snapshots[-1:] + snapshots[:1]:
        assert as_view(table.scan(snapshot=snapshot).to_arrow()) == view
        for f in chosen:
            check_scan(table, snapshot, f, columns)


def test_a_point_lookup_opens_one_base_file_and_its_nodes_change_files(
    shared_catalog: firn.Catalog,
) -> None:
    kind = KEY_KINDS[0]
    schema = table_schema(kind)
    table = shared_catalog.create_table(
        "lookup",
        schema,
        ["part", "k"],
        ["part"],
        {"change.buckets": 8, "base.buckets": 4, "target-file-size": "2KiB", **HASH_TREE},
    )
    model = ReferenceModel()
    ops: list[Row] = [
        {"part": p, "k": n, "qty": n, "label": f"row {n}", "price": 1.5, "_op": "U"}
        for p in PARTS
        for n in range(400)
    ]
    table.commit(as_change_set(ops, schema))
    model.apply(ops)
    firn.compact(table, engine="local")
    later: list[Row] = [
        {"part": "a", "k": n, "qty": -n, "label": None, "price": None, "_op": "U"}
        for n in range(0, 400, 7)
    ] + [{"part": "a", "k": 14, "qty": None, "label": None, "price": None, "_op": "D"}]
    table.commit(as_change_set(later, schema))
    model.apply(later)
    files = table.files().to_pylist()
    base_a = [f for f in files if f["store"] == "base" and f["partition"] == "part=a"]
    assert len(base_a) > 4, "small target files: several base files per node"

    for k in (21, 14, 5):
        scan = table.scan(filter=f"part = 'a' and k = {k}")
        report = scan.explain()
        kept = [s.files for s in scan.splits()]
        kept_files = [e for files_ in kept for e in files_]
        assert sum(e.store == "base" for e in kept_files) <= 1
        node_hash = hash_keys([pa.array(["a"]), pa.array([k], pa.int64())])
        assert all(e.node.contains(node_hash).all() for e in kept_files)
        assert report.routed_keys == 1
        assert report.pruned[PARTITION][0] > 0
        assert report.pruned[KEY_NODE][0] > 0
        assert report.pruned[KEY_RANGE][0] > 0
        assert report.files_kept == len(kept_files)
        # At most the I and D file of the key's change node (one commit since the
        # compaction), each only if the key lies in its min/max range.
        assert sum(e.store == "change" for e in kept_files) <= 2
        want = [model.rows[("a", k)]] if ("a", k) in model.rows else []
        assert scan.to_arrow().to_pylist() == want
        assert "pruned (key node)" in str(report)

    # Not the whole key: no routing, but partition pruning still applies.
    report = table.scan(filter="k = 5 and part = 'b' or part = 'c'").explain()
    assert report.routed_keys is None
    assert report.pruned[PARTITION][0] == sum(f["partition"] == "part=a" for f in files)
    # A filter no key can satisfy reads nothing.
    empty = table.scan(filter="part = 'a' and k = 1 and k = 2")
    assert empty.explain().files_kept == 0
    assert empty.to_arrow().num_rows == 0


def test_a_non_key_filter_is_applied_after_the_merge(shared_catalog: firn.Catalog) -> None:
    """The older version of a row matches; its newer upsert or its delete does not."""
    schema = table_schema(KEY_KINDS[0])
    table = shared_catalog.create_table("after_merge", schema, ["part", "k"])
    old = [
        {"part": "a", "k": k, "qty": 100, "label": "old", "price": 1.0, "_op": "U"}
        for k in range(4)
    ]
    table.commit(as_change_set(old, schema))
    firn.compact(table, engine="local")
    table.commit(
        as_change_set(
            [
                {"part": "a", "k": 0, "qty": 1, "label": "new", "price": 1.0, "_op": "U"},
                {"part": "a", "k": 1, "qty": None, "label": None, "price": None, "_op": "D"},
                # delete-then-insert in one commit: the insert stands.
                {"part": "a", "k": 2, "qty": None, "label": None, "price": None, "_op": "D"},
                {"part": "a", "k": 2, "qty": 100, "label": "again", "price": 2.0, "_op": "U"},
            ],
            schema,
        )
    )
    got = table.scan(filter="qty >= 100", columns=["k", "label"]).to_arrow()
    assert sorted(got.to_pylist(), key=lambda r: r["k"]) == [
        {"k": 2, "label": "again"},
        {"k": 3, "label": "old"},
    ]
    report = table.scan(filter="qty >= 100 and part = 'a'").explain()
    assert report.after_merge == "qty >= 100"
    assert report.change_filter == "part = 'a'"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("nope = 1", "unknown column 'nope'"),
        ("k = ", "expected a value"),
        ("k = 'x'", "cannot be compared"),
        ("(k = 1", "expected ')'"),
        (pc.field("nope") == 1, "does not fit the table"),
        (42, "filter must be"),
    ],
)
def test_bad_filters_raise_config_errors(
    shared_catalog: firn.Catalog, bad: object, message: str
) -> None:
    table = shared_catalog.create_table(
        f"bad_{next(_names)}", table_schema(KEY_KINDS[0]), ["part", "k"]
    )
    with pytest.raises(firn.ConfigError, match=re.escape(message)):
        table.scan(filter=bad)
    with pytest.raises(firn.ConfigError, match="unknown columns"):
        table.scan(columns=["k", "nope"])
    with pytest.raises(firn.ConfigError, match=re.escape(message)):
        table.changes(0, filter=bad)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(KEY_KINDS),
    data=st.data(),
)
def test_changes_are_the_committed_rows_between_two_snapshots(
    shared_catalog: firn.Catalog, kind: KeyKind, data: st.DataObject
) -> None:
    schema = table_schema(kind)
    table = shared_catalog.create_table(
        f"changes_{next(_names)}",
        schema,
        ["part", "k"],
        ["part"],
        {"change.buckets": data.draw(st.sampled_from(LEVELS))},
    )
    committed: list[tuple[int, list[Row]]] = []  # (snapshot, ops)
    views: dict[int, dict[Any, Row]] = {0: {}}
    model = ReferenceModel()
    for _ in range(data.draw(st.integers(1, 6))):
        if committed and data.draw(st.booleans()):
            firn.compact(table, kind=data.draw(st.sampled_from(["major", "minor"])), engine="local")
        else:
            ops = data.draw(operations(kind))
            table.commit(as_change_set(ops, schema))
            committed.append((table.current_snapshot(), ops))
            model.apply(ops)
        # A compaction makes a snapshot per partition, each with the same view.
        for snapshot in range(max(views) + 1, table.current_snapshot() + 1):
            views[snapshot] = model.view()
    end = table.current_snapshot()
    start = data.draw(st.integers(0, end))
    got = table.changes(start, end).to_arrow()
    assert got.column_names == [*schema.names, "_op", "_seq", "_ord"]
    want = [
        {c: (v if op["_op"] == "U" or c in ("part", "k", "_op") else None) for c, v in op.items()}
        for snapshot, ops in committed
        if start < snapshot <= end
        for op in ops
    ]
    rows = got.to_pylist()
    assert [{c: r[c] for c in [*schema.names, "_op"]} for r in rows] == [
        {c: w[c] for c in [*schema.names, "_op"]} for w in want
    ]
    # Applied to the view at start, the changes give the view at end.
    replay = ReferenceModel()
    replay.rows = dict(views[start])
    replay.apply([{c: r[c] for c in [*schema.names, "_op"]} for r in rows])
    assert replay.view() == views[end]
    # The splits hold the same rows.
    split_rows = [r for s in table.changes(start, end).splits() for r in s.read().to_pylist()]
    assert Counter(map(repr, split_rows)) == Counter(map(repr, rows))


def test_changes_check_their_range(shared_catalog: firn.Catalog) -> None:
    schema = table_schema(KEY_KINDS[0])
    table = shared_catalog.create_table("ranges", schema, ["part", "k"])
    table.commit(
        as_change_set(
            [{"part": "a", "k": 1, "qty": 1, "label": None, "price": None, "_op": "U"}], schema
        )
    )
    with pytest.raises(firn.ConfigError, match="between 0 and end_snapshot"):
        table.changes(2, 1)
    with pytest.raises(firn.ConfigError, match="no snapshot"):
        table.changes(0, 9)
    assert table.changes(1).to_arrow().num_rows == 0
    only_a = table.changes(0, filter="part = 'b'")
    assert only_a.to_arrow().num_rows == 0
    assert only_a.explain().start_snapshot == 0


def test_a_compacted_split_reads_file_by_file_as_it_reads_whole(
    shared_catalog: firn.Catalog,
) -> None:
    """A split with nothing to merge is read a file at a time (``Split.parts``, what
    Spark's executors send on): base files with and without deletion vectors, a
    filter and a projection give the rows of the whole read."""
    schema = table_schema(KEY_KINDS[0])
    table = shared_catalog.create_table(
        f"parts_{next(_names)}",
        schema,
        ["part", "k"],
        [],
        {
            "base.buckets": 1,
            "change.buckets": 1,
            "target-file-size": "4KiB",
            "deletion-vectors.min-file-bytes": 1,
        },
    )
    kind = KEY_KINDS[0]
    rows = [
        {"part": "a", "k": kind.value(i), "qty": i, "label": f"l{i}", "price": i / 2, "_op": "U"}
        for i in range(600)
    ]
    table.commit(as_change_set(rows, schema))
    firn.compact(table, engine="local")
    late = [dict(r, qty=-r["qty"], _op="D" if i % 3 else "U") for i, r in enumerate(rows[::40])]
    table.commit(as_change_set(late, schema))
    firn.compact(table, engine="local")  # a fold: touched files keep a deletion vector
    files = table.files().to_pylist()
    assert not [f for f in files if f["store"] == "change"]
    assert any(f["deletion_vector"] for f in files), "no file with a vector"
    for f, columns in ((None, None), ("qty > 100", ["k", "qty"])):
        scan = table.scan(filter=f, columns=columns)
        (split,) = scan.splits()
        parts = list(split.parts())
        assert len(parts) == len(split.files) >= 2
        assert rows_of(pa.concat_tables(parts)) == rows_of(split.read()) == rows_of(scan.to_arrow())
