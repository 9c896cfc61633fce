"""Sizes and durations as people write them, in table properties and settings.

A size is a number of bytes or a string with a ``B``/``KiB``/``MiB``/``GiB``/``TiB``
suffix (``"128MiB"``); a duration is a number of seconds or a string with an
``s``/``min``/``h``/``d`` suffix (``"1h"``). Parsing matches the whole string, so
``"1h\\n"`` or ``"1h; drop"`` are refused rather than read as ``1h``. Formatting
gives the shortest exact spelling in the same syntax, so error messages show ranges
the user can type back.

Why not pydantic's own types: ``ByteSize`` matches only a prefix (``"64MiB; drop"``
and ``"64MiB\n"`` read as 64 MiB), reads ``"64MB"`` and ``"64M"`` as decimal
megabytes and ``"0.5B"`` as 0; ``timedelta`` reads ISO 8601 (``"PT10M"``) and
``"HH:MM:SS"`` but not ``"10min"``, ``"30s"``, ``"1h"`` or a number in a string.
Switching would change what users' properties mean, so the two small parsers stay.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

SIZE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
DURATION_UNITS = {"s": 1, "min": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)?\s*")
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|min|h|d)?\s*")


def parse_size(value: Any) -> Any:
    """A size string as an int of bytes; anything else is left to the field's type."""
    if isinstance(value, bool):
        raise ValueError("must be a size, not a boolean")
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match is None:
            raise ValueError(f"not a size: {value!r} (use bytes or e.g. '128MiB')")
        return int(float(match[1]) * SIZE_UNITS[match[2] or "B"])
    return value


def parse_duration(value: Any) -> Any:
    """A duration string as float seconds; anything else is left to the field's type."""
    if isinstance(value, bool):
        raise ValueError("must be a duration, not a boolean")
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match is None:
            raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '1h')")
        return float(match[1]) * DURATION_UNITS[match[2] or "s"]
    return value


def not_boolean(value: Any) -> Any:
    """``True`` is an int to Python, never a count or a ratio to a user."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def format_size(n: float) -> str:
    """Bytes in the largest unit that divides them exactly: ``1KiB``, ``1536B``."""
    for unit, factor in reversed(SIZE_UNITS.items()):
        if n >= factor and n % factor == 0:
            return f"{int(n // factor)}{unit}"
    return f"{n:g}B"


def format_duration(seconds: float) -> str:
    """Seconds in the largest unit that divides them exactly: ``36500d``, ``90s``."""
    for unit, factor in reversed(DURATION_UNITS.items()):
        if seconds >= factor and seconds % factor == 0:
            return f"{int(seconds // factor)}{unit}"
    return f"{seconds:g}s"


Bytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
"""A positive size (settings use it too)."""


Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
"""A positive duration (settings use it too)."""
