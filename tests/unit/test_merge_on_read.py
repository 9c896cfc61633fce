"""The merge rule on in-memory inputs: base files, unmerged changes, row-level seqs."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from firn.model.changes import validate_changes
from firn.model.merge_on_read import SEQ, merge, run_starts
from firn.model.schema import TableSchema
from tests.changesets import (
    KEY_KINDS,
    KeyKind,
    ReferenceModel,
    as_change_set,
    as_view,
    operations,
    table_schema,
)


def definition(kind: KeyKind) -> TableSchema:
    return TableSchema.build("t", table_schema(kind), ["part", "k"], ["part"])


Commits = list[list[dict[str, object]]]


def with_seq(rows: pa.Table, seq: int) -> pa.Table:
    return rows.append_column(SEQ, pa.array([seq] * rows.num_rows, pa.int64()))


def unmerged(rows: pa.Table, max_merged_seq: int) -> pa.Table:
    return rows.filter(pa.compute.greater(rows.column(SEQ), max_merged_seq))


def change_rows(table: TableSchema, commits: Commits) -> tuple[pa.Table, pa.Table]:
    """Insert and delete rows of every commit, with ``_seq`` = commit number."""
    inserts, deletes = [], []
    for seq, ops in enumerate(commits, start=1):
        rows = with_seq(validate_changes(table, as_change_set(ops, table.schema)), seq)
        is_upsert = pa.compute.equal(rows.column("_op"), "U")
        inserts.append(rows.filter(is_upsert).drop_columns(["_op"]))
        deletes.append(
            rows.filter(pa.compute.invert(is_upsert)).select([*table.primary_key, "_ord", "_seq"])
        )
    return pa.concat_tables(inserts), pa.concat_tables(deletes)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(KEY_KINDS),
    data=st.data(),
)
def test_merge_equals_the_model_for_any_merged_prefix(kind: KeyKind, data: st.DataObject) -> None:
    table = definition(kind)
    commits = data.draw(st.lists(operations(kind), min_size=1, max_size=8))
    check_merge(table, commits, data)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from([k for k in KEY_KINDS if pa.types.is_integer(k.type)]),
    data=st.data(),
)
def test_one_integer_key_merges_as_the_model(kind: KeyKind, data: st.DataObject) -> None:
    """A table keyed by one integer column drops replaced base rows by a numpy
    membership test, not the join: the same rule, held to the same model."""
    table = TableSchema.build("t", table_schema(kind), ["k"], [])
    commits = data.draw(st.lists(operations(kind), min_size=1, max_size=8))
    # One value of "part" everywhere: the model's key (part, k) is then the table's.
    commits = [[{**row, "part": "p"} for row in ops] for ops in commits]
    check_merge(table, commits, data)


def check_merge(table: TableSchema, commits: Commits, data: st.DataObject) -> None:
    """The merge of the commits after a drawn merged prefix equals the model."""
    merged_seq = data.draw(st.integers(0, len(commits)))
    model = ReferenceModel()
    for ops in commits[:merged_seq]:
        model.apply(ops)
    base = pa.Table.from_pylist(list(model.view().values()), schema=table.schema)
    for ops in commits[merged_seq:]:
        model.apply(ops)
    inserts, deletes = change_rows(table, commits)
    # Rows are shuffled: the merge must not rely on file or row order.
    order = data.draw(st.permutations(range(inserts.num_rows)))
    inserts = inserts.take(pa.array(order, pa.int64()))
    view = merge(table, base, unmerged(inserts, merged_seq), unmerged(deletes, merged_seq))
    assert as_view(view) == model.view()


def test_the_tricky_cases_of_one_commit() -> None:
    table = definition(KEY_KINDS[0])
    rows = [
        # insert then delete: gone
        {"part": "a", "k": 1, "qty": 1, "_op": "U"},
        {"part": "a", "k": 1, "_op": "D"},
        # delete then insert: kept
        {"part": "a", "k": 2, "_op": "D"},
        {"part": "a", "k": 2, "qty": 2, "_op": "U"},
        # repeated upserts: the last wins
        {"part": "b", "k": 3, "qty": 30, "_op": "U"},
        {"part": "b", "k": 3, "qty": 31, "_op": "U"},
        # delete of an absent key: harmless
        {"part": "c", "k": 4, "_op": "D"},
    ]
    full = [{"qty": None, "label": None, "price": None, **r} for r in rows]
    inserts, deletes = change_rows(table, [full])
    base = pa.Table.from_pylist(
        [{"part": "a", "k": 2, "qty": 0}, {"part": "b", "k": 9, "qty": 9}], schema=table.schema
    )
    view = merge(table, base, inserts, deletes)
    assert sorted((r["part"], r["k"], r["qty"]) for r in view.to_pylist()) == [
        ("a", 2, 2),
        ("b", 3, 31),
        ("b", 9, 9),
    ]


def test_run_starts_compares_every_key_column() -> None:
    keys = pa.table({"a": [1, 1, 1, 2, 2], "b": ["x", "x", "y", "y", "y"]})
    assert run_starts(keys).to_pylist() == [0, 2, 3]
    assert run_starts(keys.slice(0, 0)).to_pylist() == []
