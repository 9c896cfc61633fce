"""Figures as people read them: sizes, durations, a publication's freshness, a
partition's name. Shared by the CLI and the web dashboard, so both say the same."""

from __future__ import annotations

from typing import Any


def size(n: int) -> str:
    """Bytes for people: 512 B, 1.5 KiB, 12.0 MiB, ..."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    """Seconds for people: 0.4s, 42s, 3m05s, 2h07m."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def freshness(publication: dict[str, Any] | None) -> str:
    """A table's Iceberg publication in a word or two (``firn status``'s PUBLISHED):
    the lag of its last publication, ``behind`` by the age of the oldest snapshot
    waiting, ``never``, ``off`` (iceberg.publish false) or ``error``."""
    if publication is None:
        return "-"
    state = publication["state"]
    if state == "behind" and publication.get("behind_seconds") is not None:
        return f"behind {duration(publication['behind_seconds'])}"
    if state == "current" and publication.get("lag_seconds") is not None:
        return f"lag {duration(publication['lag_seconds'])}"
    return str(state)


def partition_name(key: str) -> str:
    """How a partition key is shown: the unpartitioned table's '' as ``(all)``."""
    return key or "(all)"
