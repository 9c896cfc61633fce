"""A reference model of a table whose schema changes, and random lives for it.

The model is the rule of schema evolution written the plainest way: columns are
(field id, name, type, default); a row is a dict from field id to value. Adding a
column gives every existing row its default; an upsert that lacks a column added
since the table was made (a producer still on an older version) takes the default
too; dropping a column hides it (its id is never used again); renaming, widening
and moving change how a read presents the same values. The view of a version is
every row as ``{name: value}`` for that version's columns, in its column order.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

Key = tuple[str, int]
PARTS = ["a", "b", "c"]
NEW_NAMES = ["qty", "label", "note", "score", "flag_a"]
"""Names added columns take: some are the table's own, so drop-then-add happens."""
TYPES = {"int32": pa.int32(), "int64": pa.int64(), "string": pa.string(), "float": pa.float64()}


@dataclass
class Column:
    fid: int
    name: str
    kind: str
    """A ``TYPES`` key."""
    default: Any = None
    original: bool = False
    """Whether the table was created with it (a change set may not leave it out)."""

    @property
    def type(self) -> pa.DataType:
        return TYPES[self.kind]


def first_columns() -> list[Column]:
    return [
        Column(1, "part", "string", original=True),
        Column(2, "k", "int64", original=True),
        Column(3, "qty", "int32", original=True),
        Column(4, "label", "string", original=True),
        Column(5, "price", "float", original=True),
    ]


KEY_NAMES = ("part", "k")


def schema_of(columns: Sequence[Column]) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.type, nullable=c.name not in KEY_NAMES) for c in columns])


@dataclass
class SchemaModel:
    columns: list[Column] = field(default_factory=first_columns)
    rows: dict[Key, dict[int, Any]] = field(default_factory=dict)
    next_fid: int = 6

    def copy(self) -> SchemaModel:
        return copy.deepcopy(self)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def value_columns(self) -> list[Column]:
        return [c for c in self.columns if c.name not in KEY_NAMES]

    # -- data --------------------------------------------------------------------

    def apply(self, ops: Sequence[dict[str, Any]]) -> None:
        """Ops by column name (``_op`` U/D); a missing added column takes its default."""
        for op in ops:
            key = (op["part"], op["k"])
            if op["_op"] == "D":
                self.rows.pop(key, None)
                continue
            self.rows[key] = {c.fid: op.get(c.name, c.default) for c in self.columns}

    def view(self) -> dict[Key, dict[str, Any]]:
        return {
            key: {c.name: row.get(c.fid, c.default) for c in self.columns}
            for key, row in self.rows.items()
        }

    # -- schema ------------------------------------------------------------------

    def add(self, name: str, kind: str, default: Any) -> None:
        column = Column(self.next_fid, name, kind, default)
        self.next_fid += 1
        self.columns.append(column)
        for row in self.rows.values():
            row[column.fid] = default

    def drop(self, name: str) -> None:
        self.columns.remove(self.column(name))

    def rename(self, name: str, new: str) -> None:
        self.column(name).name = new

    def widen(self, name: str) -> None:
        self.column(name).kind = "int64"

    def move_first(self, name: str) -> None:
        column = self.column(name)
        self.columns.remove(column)
        self.columns.insert(0, column)


def as_named_view(table: pa.Table) -> dict[Key, dict[str, Any]]:
    rows = table.to_pylist()
    view = {(r["part"], r["k"]): r for r in rows}
    assert len(view) == len(rows), "the merged view has duplicate keys"
    return view


# -- random lives -------------------------------------------------------------------


def value_of(kind: str) -> st.SearchStrategy[Any]:
    if kind == "int32":
        return st.none() | st.integers(-(2**31), 2**31 - 1)
    if kind == "int64":
        return st.none() | st.integers(-(2**40), 2**40)
    if kind == "float":
        return st.none() | st.floats(allow_nan=False, width=32)
    return st.none() | st.text(max_size=5)


@st.composite
def operations(draw: st.DrawFn, model: SchemaModel) -> tuple[list[dict[str, Any]], list[str]]:
    """One commit's ops for the model's current columns, and the added columns the
    producer leaves out (one still on an earlier version)."""
    optional = [c.name for c in model.value_columns() if not c.original]
    left_out = draw(st.lists(st.sampled_from(optional), unique=True)) if optional else []
    ops = []
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["U", "U", "D"]))
        row: dict[str, Any] = {
            "part": draw(st.sampled_from(PARTS)),
            "k": draw(st.integers(0, 12)),
            "_op": op,
        }
        for c in model.value_columns():
            if c.name not in left_out:
                row[c.name] = draw(value_of(c.kind)) if op == "U" else None
        ops.append(row)
    return ops, left_out


@st.composite
def schema_changes(draw: st.DrawFn, model: SchemaModel) -> list[tuple[Any, ...]]:
    """One update_schema() block: one to three operations that the model allows."""
    trial = model.copy()
    block: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 3))):
        values = [c.name for c in trial.value_columns()]
        names = {c.name for c in trial.columns}
        choices = ["add", "add"]
        if len(values) > 1:
            choices.append("drop")
        if values:
            choices += ["rename", "move"]
        if any(trial.column(v).kind == "int32" for v in values):
            choices.append("widen")
        action = draw(st.sampled_from(choices))
        if action == "add":
            free = [n for n in NEW_NAMES if n not in names]
            if not free:
                continue
            name = draw(st.sampled_from(free))
            kind = draw(st.sampled_from(sorted(TYPES)))
            default = draw(value_of(kind))
            block.append(("add", name, kind, default))
            trial.add(name, kind, default)
        elif action == "drop":
            name = draw(st.sampled_from(values))
            block.append(("drop", name))
            trial.drop(name)
        elif action == "rename":
            name = draw(st.sampled_from(values))
            free = [n for n in [*NEW_NAMES, f"{name}_2"] if n not in names]
            if not free:  # every new name taken, and name_2 too: nothing to rename to
                continue
            new = draw(st.sampled_from(free))
            block.append(("rename", name, new))
            trial.rename(name, new)
        elif action == "widen":
            name = draw(st.sampled_from([v for v in values if trial.column(v).kind == "int32"]))
            block.append(("widen", name))
            trial.widen(name)
        else:
            name = draw(st.sampled_from(values))
            block.append(("move", name))
            trial.move_first(name)
    return block


def apply_block(model: SchemaModel, block: Sequence[tuple[Any, ...]]) -> None:
    for op in block:
        if op[0] == "add":
            model.add(op[1], op[2], op[3])
        elif op[0] == "drop":
            model.drop(op[1])
        elif op[0] == "rename":
            model.rename(op[1], op[2])
        elif op[0] == "widen":
            model.widen(op[1])
        else:
            model.move_first(op[1])


def update(table: Any, block: Sequence[tuple[Any, ...]]) -> None:
    """Apply ``block`` to a firn Table as one ``update_schema()``."""
    with table.update_schema() as u:
        for op in block:
            if op[0] == "add":
                u.add_column(op[1], TYPES[op[2]], default=op[3])
            elif op[0] == "drop":
                u.delete_column(op[1])
            elif op[0] == "rename":
                u.rename_column(op[1], op[2])
            elif op[0] == "widen":
                u.update_column(op[1], field_type=pa.int64())
            else:
                u.move_first(op[1])


def change_set(model: SchemaModel, ops: list[dict[str, Any]], left_out: Sequence[str]) -> pa.Table:
    columns = [c for c in model.columns if c.name not in left_out]
    schema = schema_of(columns).append(pa.field("_op", pa.string()))
    return pa.Table.from_pylist(ops, schema=schema)
