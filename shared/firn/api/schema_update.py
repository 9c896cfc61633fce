"""``Table.update_schema()``: a block of schema changes applied as one version.

    with table.update_schema() as u:
        u.add_column("discount", pa.decimal128(12, 2), default=Decimal("0"))
        u.rename_column("note", "comment")
        u.update_column("qty", field_type=pa.int64())

Each call is checked as it is made (``firn.model.evolution``: a refused one raises
``ConfigError`` at once); nothing reaches the catalog until the block ends without
an exception, and then everything does, in one transaction with one snapshot. A
block that raises changes nothing. ``commit()`` does the same without ``with``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

import pyarrow as pa

from firn.errors import ConfigError
from firn.model.evolution import SchemaChange
from firn.model.schema import SchemaVersion


class UpdateSchema:
    """The pending changes of one ``update_schema()`` block; ``apply`` (the table's)
    commits them."""

    def __init__(
        self, change: SchemaChange, apply: Callable[[SchemaChange], SchemaVersion | None]
    ) -> None:
        self._apply = apply
        self._change = change
        self._done = False
        self.committed: SchemaVersion | None = None
        """The version the block made (None: not committed, or nothing changed)."""

    def __enter__(self) -> UpdateSchema:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self._done = True  # the block failed: nothing is applied

    def _open(self) -> SchemaChange:
        if self._done:
            raise ConfigError("this schema update was committed or abandoned already")
        return self._change

    def add_column(
        self,
        name: str,
        field_type: pa.DataType,
        default: Any = None,
        doc: str | None = None,
        *,
        required: bool = False,
    ) -> UpdateSchema:
        """A new column, last. Rows written before it existed, and change sets that
        lack it, read as ``default`` (null when None). ``required=True`` needs a
        default."""
        self._open().add_column(name, field_type, default, doc, required=required)
        return self

    def delete_column(self, name: str) -> UpdateSchema:
        """Drop a column (not a key or partition column); its field id is never reused."""
        self._open().delete_column(name)
        return self

    def rename_column(self, name: str, new_name: str) -> UpdateSchema:
        """The same column, values and field id under a new name (not a partition column)."""
        self._open().rename_column(name, new_name)
        return self

    def update_column(
        self,
        name: str,
        field_type: pa.DataType | None = None,
        required: bool | None = None,
        doc: str | None = None,
    ) -> UpdateSchema:
        """Widen the type losslessly, make the column optional (``required=False``),
        or set its doc."""
        self._open().update_column(name, field_type, required, doc)
        return self

    def move_first(self, name: str) -> UpdateSchema:
        self._open().move_first(name)
        return self

    def move_after(self, name: str, after: str) -> UpdateSchema:
        self._open().move_after(name, after)
        return self

    def move_before(self, name: str, before: str) -> UpdateSchema:
        self._open().move_before(name, before)
        return self

    def commit(self) -> SchemaVersion | None:
        """Apply the block as one new version; returns it (None: nothing changed)."""
        change = self._open()
        self._done = True
        self.committed = self._apply(change)
        return self.committed
