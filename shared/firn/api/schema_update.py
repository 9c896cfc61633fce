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

from firn.errors import ConfigError
from firn.model.evolution import SchemaChange, WorkingColumn
from firn.model.schema import SchemaVersion, TableSchema


class UpdateSchema(SchemaChange):
    """The pending changes of one ``update_schema()`` block: the operations are
    ``SchemaChange``'s; ``apply_change`` (the table's) commits them."""

    def __init__(
        self,
        current: TableSchema,
        apply_change: Callable[[SchemaChange], SchemaVersion | None],
    ) -> None:
        super().__init__(current)
        self._apply_change = apply_change
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

    def _check_open(self) -> None:
        if self._done:
            raise ConfigError("this schema update was committed or abandoned already")

    # Every operation looks its columns up through these two: none runs once done.
    def _find(self, name: str) -> WorkingColumn:
        self._check_open()
        return super()._find(name)

    def _free(self, name: str) -> None:
        self._check_open()
        super()._free(name)

    def commit(self) -> SchemaVersion | None:
        """Apply the block as one new version; returns it (None: nothing changed)."""
        self._check_open()
        self._done = True
        self.committed = self._apply_change(self)
        return self.committed
