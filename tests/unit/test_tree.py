"""The hash tree's nodes: levels, ancestry, overlap, projection."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from firn.errors import ConfigError
from firn.model.tree import ROOT, Node

levels = st.integers(0, 8).map(lambda e: 1 << e)


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    m = draw(levels)
    return Node(m, draw(st.integers(0, m - 1)))


@pytest.mark.parametrize(("m", "i"), [(0, 0), (3, 1), (4, 4), (4, -1), (-2, 0)])
def test_invalid_nodes_are_refused(m: int, i: int) -> None:
    with pytest.raises(ConfigError):
        Node(m, i)


def test_ancestry_by_example() -> None:
    assert ROOT.is_ancestor_or_self_of(Node(8, 5))
    assert Node(2, 1).is_ancestor_or_self_of(Node(8, 5))
    assert not Node(2, 0).is_ancestor_or_self_of(Node(8, 5))
    assert not Node(8, 5).is_ancestor_or_self_of(Node(2, 1))
    assert Node(4, 1).overlaps(Node(2, 1))
    assert not Node(4, 1).overlaps(Node(4, 3))  # siblings under (2, 1)
    assert Node(4, 1).project(2) == [Node(2, 1)]
    assert Node(2, 1).project(8) == [Node(8, 1), Node(8, 3), Node(8, 5), Node(8, 7)]


@given(nodes(), nodes())
def test_overlap_means_a_common_key_can_exist(a: Node, b: Node) -> None:
    # A hash lands in both nodes iff it is congruent to both indexes; check every
    # residue at the deeper level.
    deep = max(a.m, b.m)
    hashes = np.arange(deep, dtype=np.uint64)
    common = bool(np.any(a.contains(hashes) & b.contains(hashes)))
    assert a.overlaps(b) == common


@given(nodes(), levels)
def test_projection_covers_exactly_the_overlapping_nodes_of_a_level(node: Node, m: int) -> None:
    projected = node.project(m)
    every = [Node(m, i) for i in range(m)]
    assert projected == [n for n in every if n.overlaps(node)]
    if m >= node.m:
        assert all(node.is_ancestor_or_self_of(n) for n in projected)
