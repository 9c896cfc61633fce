"""Random change sets and the reference model every merge is checked against.

The model is the design §2 rule written the slowest, plainest way: a dict from key to
row, applying every operation in (seq, row) order; an upsert stores the row, a delete
removes the key. Keys come from a small domain so that commits keep hitting the same
keys (repeated keys in a commit, delete-then-insert, insert-then-delete, deletes of
absent keys all occur).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

Row = dict[str, Any]


@dataclass(frozen=True)
class KeyKind:
    """A type for the second key column, with a map from small ints to its values."""

    name: str
    type: pa.DataType
    value: Callable[[int], Any]


KEY_KINDS = [
    KeyKind("int64", pa.int64(), lambda n: n - 8),
    KeyKind("int32", pa.int32(), lambda n: n * 1000),
    KeyKind("string", pa.string(), lambda n: f"k{n}" if n % 3 else f"ключ-{n}"),
    KeyKind("binary", pa.binary(), lambda n: bytes([n, 0, 255 - n])),
    KeyKind("date", pa.date32(), lambda n: dt.date(2024, 2, 27) + dt.timedelta(days=n)),
    KeyKind(
        "timestamp",
        pa.timestamp("us", "UTC"),
        lambda n: dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=n * 7),
    ),
    KeyKind("decimal", pa.decimal128(12, 2), lambda n: Decimal(n) / 4 - 2),
]

PARTS = ["a", "b", "c"]


def table_schema(kind: KeyKind) -> pa.Schema:
    return pa.schema(
        [
            pa.field("part", pa.string(), nullable=False),
            pa.field("k", kind.type, nullable=False),
            pa.field("qty", pa.int64()),
            pa.field("label", pa.string()),
            pa.field("price", pa.float64()),
        ]
    )


@st.composite
def operations(draw: st.DrawFn, kind: KeyKind, max_size: int = 12) -> list[Row]:
    """One commit's operations: rows with ``_op``, keys from a small domain."""
    ops = []
    for _ in range(draw(st.integers(1, max_size))):
        op = draw(st.sampled_from(["U", "U", "D"]))
        row: Row = {
            "part": draw(st.sampled_from(PARTS)),
            "k": kind.value(draw(st.integers(0, 15))),
            "qty": None,
            "label": None,
            "price": None,
            "_op": op,
        }
        if op == "U":
            row["qty"] = draw(st.none() | st.integers(-(2**40), 2**40))
            row["label"] = draw(st.none() | st.text(max_size=6))
            row["price"] = draw(st.none() | st.floats(allow_nan=False, width=32))
        ops.append(row)
    return ops


def as_change_set(ops: list[Row], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(ops, schema=schema.append(pa.field("_op", pa.string())))


def key_of(row: Row) -> tuple[Any, ...]:
    return (row["part"], row["k"])


class ReferenceModel:
    """The merged view, by brute force."""

    def __init__(self) -> None:
        self.rows: dict[tuple[Any, ...], Row] = {}

    def apply(self, ops: list[Row]) -> None:
        for op in ops:
            row = {c: v for c, v in op.items() if c != "_op"}
            if op["_op"] == "U":
                self.rows[key_of(row)] = row
            else:
                self.rows.pop(key_of(row), None)

    def view(self) -> dict[tuple[Any, ...], Row]:
        return dict(self.rows)


def as_view(table: pa.Table) -> dict[tuple[Any, ...], Row]:
    """A read() result keyed like the model; fails on duplicate keys."""
    rows = table.to_pylist()
    view = {key_of(r): r for r in rows}
    assert len(view) == len(rows), "the merged view has duplicate keys"
    return view


LEVELS = [1, 2, 4, 8]
Step = tuple[str, Any]
"""("commit", operations), ("compact", (kind, engine)) or ("buckets", (change, base))."""


@st.composite
def life_steps(
    draw: st.DrawFn, kind: KeyKind, *, engines: Sequence[str] = ("local",), most: int = 7
) -> list[Step]:
    """A table's life: a commit first, then up to ``most`` commits, compactions of every
    kind (each on one of ``engines``) and bucket changes, in any order."""
    steps: list[Step] = [("commit", draw(operations(kind)))]
    for _ in range(draw(st.integers(1, most))):
        action = draw(st.sampled_from(["commit", "commit", "compact", "buckets"]))
        if action == "commit":
            steps.append(("commit", draw(operations(kind))))
        elif action == "compact":
            compaction = draw(st.sampled_from(["major", "major", "full", "minor"]))
            steps.append(("compact", (compaction, draw(st.sampled_from(engines)))))
        else:
            steps.append(
                ("buckets", (draw(st.sampled_from(LEVELS)), draw(st.sampled_from(LEVELS))))
            )
    return steps


@st.composite
def evolving_table(draw: st.DrawFn, kind: KeyKind) -> tuple[dict[str, Any], list[Step]]:
    """Properties and the steps of a table's life (``life_steps``, compacted locally)."""
    properties = {
        "change.buckets": draw(st.sampled_from(LEVELS)),
        "base.buckets": draw(st.sampled_from(LEVELS)),
        "target-file-size": draw(st.sampled_from(["2KiB", "64MiB"])),
        # Small commits' rows at the partition's root, read by every split of it.
        "change.split-rows": draw(st.sampled_from([0, 0, 4, 1000])),
        # Small partitions' base at the root: never, until they grow, always.
        "base.split-bytes": draw(st.sampled_from([0, 0, "4KiB", "1GiB"])),
    }
    return properties, draw(life_steps(kind))
