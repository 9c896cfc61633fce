"""How the vertical merge joins its spill batches into stitched batches
(``firn.engine.vertical._stitched``): every batch once and in order, no stitched
batch longer than asked, and a new one at every cut, so no output file spans a cut."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from firn.engine.vertical import SPILL_ROWS, _edges, _stitched


@given(
    rows=st.integers(1, 20 * SPILL_ROWS),
    cut_points=st.lists(st.floats(0, 1), max_size=6),
    per_batch=st.integers(1, 5),
)
def test_stitched_batches_cover_every_row_once_and_start_at_every_cut(
    rows: int, cut_points: list[float], per_batch: int
) -> None:
    cuts = {int(p * rows) for p in cut_points}
    edges = _edges(rows, cuts)
    spans = _stitched(edges, cuts, per_batch)
    assert spans[0][0] == 0
    assert spans[-1][1] == len(edges) - 1
    for (_, end), (first, _) in itertools.pairwise(spans):
        assert end == first, "stitched batches leave out or repeat a spill batch"
    assert all(0 < end - first <= per_batch for first, end in spans)
    starts = {edges[first] for first, _ in spans}
    assert {c for c in cuts if c < rows} <= starts, "a stitched batch spans a cut"
    assert all(b - a <= SPILL_ROWS for a, b in itertools.pairwise(edges))
