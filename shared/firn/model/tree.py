"""Nodes of the primary-key hash tree (design §2, the "Arctic Tree").

Node ``(m, i)`` holds the keys whose hash satisfies ``H(key) mod m == i``, with ``m`` a
power of two. Level ``m`` splits every node of level ``m/2`` in two, so the nodes form
a binary tree: ``(m, i)`` has the children ``(2m, i)`` and ``(2m, i + m)``. Two nodes
can hold a common key only when one is an ancestor-or-self of the other; this is what
lets the planner treat sibling subtrees as independent tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from firn.errors import ConfigError
from firn.model.keyhash import U64


def _check_level(m: int) -> int:
    if not isinstance(m, int) or m <= 0 or m & (m - 1):
        raise ConfigError(f"tree level must be a positive power of two, got {m!r}")
    return m


@dataclass(frozen=True, order=True)
class Node:
    """One node of the hash tree; ``Node(1, 0)`` is the root and holds every key."""

    m: int
    """The level: a power of two, the number of nodes at this depth."""
    i: int
    """The index at this level: ``0 <= i < m``."""

    def __post_init__(self) -> None:
        _check_level(self.m)
        if not isinstance(self.i, int) or not 0 <= self.i < self.m:
            raise ConfigError(f"node index must be in [0, {self.m}), got {self.i!r}")

    def __str__(self) -> str:
        return f"({self.m},{self.i})"

    def is_ancestor_or_self_of(self, other: Node) -> bool:
        return self.m <= other.m and other.i % self.m == self.i

    def overlaps(self, other: Node) -> bool:
        """Whether the two nodes can hold a common key."""
        return self.is_ancestor_or_self_of(other) or other.is_ancestor_or_self_of(self)

    def ancestor_at(self, m: int) -> Node:
        """The ancestor-or-self of this node at the shallower-or-equal level ``m``."""
        if _check_level(m) > self.m:
            raise ConfigError(f"level {m} is deeper than node {self}")
        return Node(m, self.i % m)

    def descendants_at(self, m: int) -> Iterator[Node]:
        """Every descendant-or-self at the deeper-or-equal level ``m``, by index."""
        if _check_level(m) < self.m:
            raise ConfigError(f"level {m} is shallower than node {self}")
        for i in range(self.i, m, self.m):
            yield Node(m, i)

    def project(self, m: int) -> list[Node]:
        """The nodes at level ``m`` that share keys with this one (design §5 step 2)."""
        if m <= self.m:
            return [self.ancestor_at(m)]
        return list(self.descendants_at(m))

    def contains(self, hashes: U64) -> npt.NDArray[np.bool_]:
        """Which of the key hashes fall in this node."""
        inside: npt.NDArray[np.bool_] = (hashes & np.uint64(self.m - 1)) == np.uint64(self.i)
        return inside


ROOT = Node(1, 0)
