"""Checks of a table's files that several model tests share."""

from __future__ import annotations

import itertools
from typing import Any

import firn
from firn.catalog.files import files_at
from firn.model.values import key_from_json


def check_base_files(table: firn.Table) -> None:
    """Base files of one node never overlap in key range; change files are gone
    from partitions that were just compacted (checked by the caller)."""
    files = table.files()
    rows = [r for r in files.to_pylist() if r["store"] == "base"]
    entries = {e.file_id: e for e in _entries(table)}
    by_node: dict[tuple[str, str], list[Any]] = {}
    key_schema = table.definition.key_schema
    for r in rows:
        e = entries[r["file_id"]]
        lo = key_from_json(e.min_key, key_schema)
        hi = key_from_json(e.max_key, key_schema)
        assert lo <= hi
        by_node.setdefault((r["partition"], r["node"]), []).append((lo, hi))
    for ranges in by_node.values():
        ranges.sort()
        for (_, hi), (lo, _) in itertools.pairwise(ranges):
            assert hi < lo, "base files of one node overlap"


def _entries(table: firn.Table) -> list[Any]:
    return files_at(table.catalog.conn, table.table_id, table.current_snapshot())
