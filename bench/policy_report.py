"""The numbers of ``policy.py``, from one demo run's JSON lines (progress once a
second, then the summary): pure, so each rule is plain to read.

- write amplification, both ways: ``(committed + rewritten) / committed`` (what
  ``firn up`` prints; 1.0 means nothing was rewritten) and ``rewritten / committed``
  (bytes compactions wrote per byte producers wrote; 0.0 means nothing was rewritten);
- read amplification: sorted runs a read of one node at the base write level merges
  (``firn.catalog.amplification``); each progress line carries a histogram over the
  nodes. Reported: the mean over time of each line's mean over nodes, and the p95 over
  every (line, node) sample, over the whole run and over its second half (the start,
  before compaction catches up, weighs heavily on the whole);
- space amplification: bytes of the live files / bytes of the merged view. The merged
  view is estimated as live rows (the producer's model) x the base files' bytes per
  row at that moment, so it is only defined once a base exists;
- backlog: unmerged change bytes over time, and the slope of a least-squares line
  through its second half, in bytes/s and as a share of the ingest rate (committed
  bytes / producing seconds). ``FLAT_SHARE`` decides "flat" or "growing".
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

FLAT_SHARE = 0.05
"""A backlog growing by less than this share of the ingest rate counts as flat:
with a sawtooth of majors emptying partitions, a smaller slope is within the noise of
a few minutes' run."""


def parse_lines(stdout: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The progress lines and the summary of ``firn up --demo --json``'s output."""
    progress, summary = [], None
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("event") == "progress":
            progress.append(event)
        elif event.get("event") == "summary":
            summary = event
    return progress, summary


def quantile(histogram: Counter[int], q: float) -> int | None:
    """Nearest-rank ``q``-quantile of values given as value -> count."""
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(q * total)), 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return value
    return max(histogram)


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The slope of the least-squares line through ``(x, y)`` points; None for fewer
    than two distinct x."""
    if len(points) < 2:
        return None
    xs = [x for x, _ in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def write_amplification(summary: dict[str, Any]) -> dict[str, Any]:
    written = summary["written"]
    committed, rewritten = written["committed_bytes"], written["compacted_bytes"]
    return {
        "committed_bytes": committed,
        "rewritten_bytes": rewritten,
        "total_per_committed": _ratio(committed + rewritten, committed),
        "rewritten_per_committed": _ratio(rewritten, committed),
        "note": "total_per_committed = (committed + rewritten) / committed, as firn up "
        "prints it; rewritten_per_committed = rewritten / committed",
    }


def read_amplification(progress: Sequence[dict[str, Any]]) -> dict[str, Any]:
    sampled = [line for line in progress if line["runs_per_node"]["mean"] is not None]
    middle = (sampled[0]["elapsed_s"] + sampled[-1]["elapsed_s"]) / 2 if sampled else 0.0
    whole, late = _runs(sampled), _runs([x for x in sampled if x["elapsed_s"] >= middle])
    return {
        "samples": len(sampled),
        "mean_runs_over_time": whole["mean"],
        "p95_runs_all_samples": whole["p95"],
        "max_runs": whole["max"],
        "mean_runs_second_half": late["mean"],
        "p95_runs_second_half": late["p95"],
        "note": "sorted runs a read of one base-level node merges: 1 for its base files "
        "(if any) + 1 per distinct unmerged change seq (a minor output is one run); "
        "mean over time of the mean over nodes, p95 over every (tick, node) sample; "
        "the second half leaves out the start, before compaction caught up",
    }


def _runs(progress: Iterable[dict[str, Any]]) -> dict[str, Any]:
    means: list[float] = []
    every: Counter[int] = Counter()
    for line in progress:
        runs = line["runs_per_node"]
        means.append(runs["mean"])
        every.update({int(k): n for k, n in runs["nodes"].items()})
    return {
        "mean": _round(statistics.fmean(means)) if means else None,
        "p95": quantile(every, 0.95),
        "max": max(every) if every else None,
    }


def space_amplification(progress: Iterable[dict[str, Any]]) -> dict[str, Any]:
    series = [
        (line["elapsed_s"], line["live_bytes"] / view)
        for line in progress
        if (view := _merged_view_bytes(line))
    ]
    second_half = _second_half(series)
    return {
        "samples": len(series),
        "mean_second_half": _round(statistics.fmean(v for _, v in second_half))
        if second_half
        else None,
        "last": _round(series[-1][1]) if series else None,
        "max": _round(max(v for _, v in series)) if series else None,
        "note": "bytes of live files / bytes of the merged view; the merged view is "
        "estimated as live rows x base bytes per base row (defined once a base exists)",
    }


def backlog(progress: Sequence[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    series = [(line["elapsed_s"], float(line["unmerged_bytes"])) for line in progress]
    ingest = _ratio(summary["written"]["committed_bytes"], summary["seconds"])
    grows = slope(_second_half(series))
    share = None if grows is None or not ingest else grows / ingest
    values = [v for _, v in series]
    return {
        "ingest_bytes_per_s": None if ingest is None else round(ingest),
        "mean_bytes": round(statistics.fmean(values)) if values else None,
        "max_bytes": round(max(values)) if values else None,
        "last_bytes": round(values[-1]) if values else None,
        "mean_seconds_of_ingest": _ratio(statistics.fmean(values), ingest) if values else None,
        "slope_bytes_per_s": None if grows is None else round(grows),
        "slope_per_ingest": None if share is None else round(share, 4),
        "verdict": None if share is None else ("flat" if share < FLAT_SHARE else "growing"),
        "note": "unmerged change bytes; slope of a least-squares line over the second "
        f"half of the run; flat when it is under {FLAT_SHARE:.0%} of the ingest rate",
    }


def series(progress: Iterable[dict[str, Any]]) -> list[list[Any]]:
    """One row per progress line, for plotting: elapsed s, rows, unmerged bytes,
    live bytes, mean and p95 runs per node, space amplification."""
    rows = []
    for line in progress:
        view = _merged_view_bytes(line)
        runs = line["runs_per_node"]
        rows.append(
            [
                line["elapsed_s"],
                line["rows"],
                line["unmerged_bytes"],
                line["live_bytes"],
                runs["mean"],
                runs["p95"],
                _round(line["live_bytes"] / view) if view else None,
            ]
        )
    return rows


SERIES_COLUMNS = [
    "elapsed_s",
    "rows",
    "unmerged_bytes",
    "live_bytes",
    "mean_runs",
    "p95_runs",
    "space_amplification",
]


def _merged_view_bytes(line: dict[str, Any]) -> float | None:
    if not line["base_rows"] or not line["live_rows"]:
        return None
    return float(line["live_rows"] * line["base_bytes"] / line["base_rows"])


def _second_half(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    if not points:
        return []
    middle = (points[0][0] + points[-1][0]) / 2
    return [p for p in points if p[0] >= middle]


def _ratio(a: float, b: float | None) -> float | None:
    return None if not b else _round(a / b)


def _round(value: float) -> float:
    return round(value, 3)
