"""What a command hands back to ``firn.cli``, and small text-layout helpers.

A command never prints its result itself: it returns the same facts twice, as JSON
data (``--json``) and as text for people, so the two cannot drift apart in what
they contain. Progress of a long wait is the one exception: it goes to stderr.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from firn.settings import FirnSettings


@dataclass(frozen=True)
class Output:
    """One command's result."""

    data: dict[str, Any]
    """The JSON document printed with ``--json``."""
    text: str
    """The same for people."""
    error: str | None = None
    """Set when the command failed after doing some work (exit status 1)."""


Command = Callable[[argparse.Namespace, FirnSettings], Output]


def columns(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows under headers, each column as wide as its widest cell."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def size(n: int) -> str:
    """Bytes for people: 512 B, 1.5 KiB, 12.0 MiB, ..."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def partition_name(key: str) -> str:
    """How a partition key is shown: the unpartitioned table's '' as ``(all)``."""
    return key or "(all)"


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value
