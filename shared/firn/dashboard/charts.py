"""Small charts over time as inline SVG: no script, nothing fetched by the browser.

``backlog_series`` replays a table's producer commits and merge points (the
catalog's ``partition_merge_history``) in time order: at each moment the backlog is
the number of (partition, commit) pairs not yet merged into the base store.
``latency_series`` gives, at each merge, the longest commit-to-compacted latency of
the commits it merged (the rule of ``firn.catalog.progress.latency_summary``: a
commit is compacted by the first merge of its partition that reached its seq).
``lag_chart`` draws each Iceberg publication as a dot: when it was published, and
how long the oldest change it shows had waited (``firn.catalog.publication``).
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from html import escape

from firn.catalog.progress import CommitPoint, MergePoint
from firn.catalog.publication import LagPoint

Point = tuple[dt.datetime, float]

WIDTH, HEIGHT, PAD = 380, 140, 28


def backlog_series(commits: Iterable[CommitPoint], merges: Iterable[MergePoint]) -> list[Point]:
    """(time, commits waiting to be merged) after each commit and merge, oldest first."""
    events: list[tuple[dt.datetime, int, str, int]] = [
        (c.at, 0, c.partition, c.seq) for c in commits
    ]
    # At one instant a merge counts after the commits it follows (0 before 1).
    events += [(m.at, 1, m.partition, m.max_merged_seq) for m in merges]
    events.sort(key=lambda e: (e[0], e[1]))
    pending: dict[str, list[int]] = defaultdict(list)
    merged: dict[str, int] = defaultdict(int)
    total, series = 0, []
    for at, is_merge, part, seq in events:
        waiting = pending[part]
        if is_merge:
            merged[part] = max(merged[part], seq)
            cut = bisect.bisect_right(waiting, merged[part])
            total -= cut
            del waiting[:cut]
        elif seq > merged[part]:
            bisect.insort(waiting, seq)
            total += 1
        series.append((at, float(total)))
    return series


def latency_series(commits: Iterable[CommitPoint], merges: Iterable[MergePoint]) -> list[Point]:
    """(merge time, seconds the oldest commit it merged had waited), oldest first."""
    by_partition: dict[str, list[MergePoint]] = defaultdict(list)
    for merge in merges:
        by_partition[merge.partition].append(merge)
    reached: dict[str, tuple[list[int], list[MergePoint]]] = {}
    for part, points in by_partition.items():
        points.sort(key=lambda m: m.snapshot_id)
        highest, running = [], 0
        for point in points:
            running = max(running, point.max_merged_seq)
            highest.append(running)
        reached[part] = (highest, points)
    longest: dict[tuple[str, int], tuple[dt.datetime, float]] = {}
    for commit in commits:
        highest, points = reached.get(commit.partition, ([], []))
        index = bisect.bisect_left(highest, commit.seq)
        if index == len(highest):
            continue  # still waiting
        merge = points[index]
        waited = (merge.at - commit.at).total_seconds()
        key = (merge.partition, merge.snapshot_id)
        if key not in longest or waited > longest[key][1]:
            longest[key] = (merge.at, waited)
    return sorted(longest.values())


def line_chart(title: str, points: Sequence[Point], unit: str = "") -> str:
    """An SVG line chart of ``points``, or a note that there is nothing to draw yet."""
    if len(points) < 2:
        return (
            f"<figure><figcaption>{escape(title)}</figcaption>"
            '<p class="muted">not enough history yet</p></figure>'
        )
    times = [p[0].timestamp() for p in points]
    values = [p[1] for p in points]
    t0, t1 = min(times), max(times)
    top = max(max(values), 1e-9)
    span = (t1 - t0) or 1.0
    xy = [
        (
            PAD + (t - t0) / span * (WIDTH - 2 * PAD),
            HEIGHT - PAD - v / top * (HEIGHT - 2 * PAD),
        )
        for t, v in zip(times, values, strict=True)
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    first = points[0][0].isoformat(sep=" ", timespec="seconds")
    last = points[-1][0].isoformat(sep=" ", timespec="seconds")
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">'
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'class="axis"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" class="axis"/>'
        f'<polyline points="{path}" class="line"/>'
        f'<text x="{PAD + 4}" y="{PAD - 8}">max {top:g}{escape(unit)}</text>'
        f'<text x="{PAD}" y="{HEIGHT - 8}">{escape(first)}</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">{escape(last)}</text>'
        "</svg></figure>"
    )


def lag_chart(title: str, points: Sequence[LagPoint], *, tables: bool = False) -> str:
    """Each publication as a dot (published at, lag in seconds), with its table
    (``tables``), lag and time in the dot's tooltip; a note when there is none."""
    if not points:
        return (
            f'<figure class="publication-lag"><figcaption>{escape(title)}</figcaption>'
            '<p class="muted">no publications in this window</p></figure>'
        )
    times = [p.published_at.timestamp() for p in points]
    t0, t1 = min(times), max(times)
    top = max(max(p.lag_seconds for p in points), 1e-9)
    span = (t1 - t0) or 1.0
    dots = []
    for t, p in zip(times, points, strict=True):
        x = PAD + (t - t0) / span * (WIDTH - 2 * PAD) if t1 > t0 else WIDTH / 2
        y = HEIGHT - PAD - p.lag_seconds / top * (HEIGHT - 2 * PAD)
        where = f"{p.table}: " if tables else ""
        tip = (
            f"{where}lag {p.lag_seconds:.1f} s, Firn snapshot {p.firn_snapshot}, "
            f"published {p.published_at.isoformat(sep=' ', timespec='seconds')}"
        )
        dots.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="dot" '
            f'data-lag="{p.lag_seconds:.3f}"><title>{escape(tip)}</title></circle>'
        )
    first = points[0].published_at.isoformat(sep=" ", timespec="seconds")
    last = points[-1].published_at.isoformat(sep=" ", timespec="seconds")
    return (
        f'<figure class="publication-lag"><figcaption>{escape(title)}</figcaption>'
        f'<svg width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">'
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'class="axis"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" class="axis"/>'
        + "".join(dots)
        + f'<text x="{PAD + 4}" y="{PAD - 8}">max {top:.3g} s</text>'
        f'<text x="{PAD}" y="{HEIGHT - 8}">{escape(first)}</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">{escape(last)}</text>'
        "</svg></figure>"
    )
