"""What a command hands back to ``firn.cli``, and small text-layout helpers.

A command never prints its result itself: it returns the same facts twice, as JSON
data (``--json``) and as text for people, so the two cannot drift apart in what
they contain. Progress of a long wait is the one exception: it goes to stderr.

The text may hold tables (``Grid``). ``show`` prints them with rich on a terminal
(ruled headers, cells wrapped to its width) and as plain aligned columns otherwise,
so piped output stays the same text scripts parse, one row per line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from firn.settings import FirnSettings

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class Grid:
    """Rows of cells under headers: a table in a command's text."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __str__(self) -> str:
        """Each column as wide as its widest cell, two spaces apart."""
        cells = [self.headers, *self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.headers))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
        return "\n".join(line.rstrip() for line in lines)

    def rich(self) -> Table:
        table = Table(box=box.SIMPLE_HEAD, header_style="bold", show_edge=False, pad_edge=False)
        for header in self.headers:
            table.add_column(header)
        for row in self.rows:
            table.add_row(*(Text(c) for c in row))
        return table


Body = str | Grid | Sequence[str | Grid]
"""A command's text: a string, a table, or lines and tables in order."""


@dataclass(frozen=True)
class Output:
    """One command's result."""

    data: dict[str, Any]
    """The JSON document printed with ``--json``."""
    text: Body
    """The same for people."""
    error: str | None = None
    """Set when the command failed after doing some work (exit status 1)."""

    def parts(self) -> list[str | Grid]:
        return [self.text] if isinstance(self.text, (str, Grid)) else list(self.text)

    def plain(self) -> str:
        """The text with its tables as aligned columns."""
        return "\n".join(str(p) for p in self.parts())


def show(output: Output, stream: IO[str]) -> None:
    """Print ``output``'s text to ``stream``: tables drawn by rich on a terminal,
    the plain text otherwise."""
    if not stream.isatty():
        print(output.plain(), file=stream)
        return
    console = Console(file=stream, highlight=False)
    for part in output.parts():
        console.print(part.rich() if isinstance(part, Grid) else Text(part))


class WaitingLine:
    """What a long wait is waiting for, on ``stream`` (stderr): a rich status line
    updated in place on a terminal, otherwise a ``firn: waiting: ...`` line per
    change. Use it as a context manager."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._last = ""
        console = Console(file=stream, highlight=False)
        self._status = console.status("waiting") if stream.isatty() else None

    def __enter__(self) -> WaitingLine:
        if self._status is not None:
            self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()

    def update(self, line: str) -> None:
        if line == self._last:
            return
        self._last = line
        if self._status is None:
            print(f"firn: waiting: {line}", file=self._stream, flush=True)
        else:
            self._status.update(Text(f"waiting: {line}"))


Command = Callable[[argparse.Namespace, FirnSettings], Output]


def grid(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> Grid:
    """Rows under headers; an empty cell (None or '') is shown as ``-``."""
    return Grid(tuple(str(h) for h in headers), tuple(tuple(_cell(v) for v in r) for r in rows))


def columns(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows under headers, each column as wide as its widest cell."""
    return str(grid(headers, rows))


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _number_type(
    parse: Callable[[str], T], accept: Callable[[T], bool], requirement: str, kind: str
) -> Callable[[str], T]:
    """An argparse type: ``parse`` the text, then refuse values ``accept`` rejects."""

    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"{requirement}, got {text}")
        return value

    return convert


# Every number a command takes has an upper bound too: an unbounded one reaches
# Postgres (a LIMIT past bigint) or the clock (a timeout of 1e300 s) and fails there
# with a traceback instead of a usage error. NaN fails every comparison, so it is
# refused by each of them; infinity is above every bound.


def int_between(low: int, high: int) -> Callable[[str], int]:
    """Integers from ``low`` to ``high``."""
    return _number_type(
        int, lambda v: low <= v <= high, f"must be from {low} to {high:,}", "an integer"
    )


def seconds_up_to(high: float, *, zero: bool = False) -> Callable[[str], float]:
    """Seconds above 0 (from 0 with ``zero``) up to ``high``."""
    low = "from 0" if zero else "greater than 0"
    return _number_type(
        float,
        lambda v: (v >= 0 if zero else v > 0) and v <= high,
        f"must be {low} and at most {high:,.0f}",
        "a number",
    )


def positive_up_to(high: float) -> Callable[[str], float]:
    """Numbers above 0 up to ``high``."""
    return _number_type(
        float, lambda v: 0 < v <= high, f"must be greater than 0 and at most {high:,g}", "a number"
    )


ratio = _number_type(float, lambda v: 0 <= v < 1, "must be at least 0 and below 1", "a number")
