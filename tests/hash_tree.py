"""Table properties for tests of the hash tree's layout.

By default a small partition keeps its files at its root node: a commit's rows in a
partition under ``change.split-rows`` (1000) are one file per operation there, and a
partition under ``base.split-bytes`` (1 MiB) keeps one base file there. A test's
tables are that small, so a test of how files and tasks spread over nodes lays its
table out on the tree at any size with these.
"""

from __future__ import annotations

from typing import Any

HASH_TREE: dict[str, Any] = {"change.split-rows": 0, "base.split-bytes": 0}
