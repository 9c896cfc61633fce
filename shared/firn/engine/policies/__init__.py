"""Compaction policies: which files of a partition each compaction rewrites.

Every policy is a small pure class behind one interface (``policy.CompactionPolicy``:
``plan(PartitionFiles) -> PlanDraft | None``), and one registry below chooses it from
the request's ``Kind`` and scope:

=============================  ==========  =================  ==============
scope                          major       minor              full
=============================  ==========  =================  ==============
``all``: ``firn compact``,     FoldAll     MergeRuns          FoldAll(full)
``firn.compact``
``due``: the services,         TieredRuns  TieredRuns(minor)  Rebucket
``--kind auto``
=============================  ==========  =================  ==============

A table without a primary key is always ``BinPack``-ed (``full`` repacks every base
file).

A table with ``compaction.major-window`` has its ``due`` policy wrapped in
``OffPeak``. Adding a policy is a new module here and a line in ``REGISTRY``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Literal

from firn.engine.policies.bin_pack import BinPack
from firn.engine.policies.fold_all import FoldAll
from firn.engine.policies.merge_runs import MergeRuns
from firn.engine.policies.off_peak import OffPeak
from firn.engine.policies.policy import CompactionPolicy, PartitionFiles
from firn.engine.policies.rebucket import Rebucket
from firn.engine.policies.tiered_runs import TieredRuns
from firn.errors import ConfigError
from firn.model.files import FileEntry
from firn.model.plans import PlanDraft
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.model.tasks import Kind

Scope = Literal["all", "due"]
"""``all``: compact everything the kind covers; ``due``: only what the policy finds
due, unit by unit (a plan request's ``scope``)."""

REGISTRY: dict[tuple[Scope, Kind], CompactionPolicy] = {
    ("all", Kind.MAJOR): FoldAll(),
    ("all", Kind.MINOR): MergeRuns(),
    ("all", Kind.FULL): FoldAll(full=True),
    ("due", Kind.MAJOR): TieredRuns(Kind.MAJOR),
    ("due", Kind.MINOR): TieredRuns(Kind.MINOR),
    ("due", Kind.FULL): Rebucket(),
}
"""The policies of keyed tables; a table without a key is always bin-packed."""


def policy_for(
    kind: Kind | str, properties: TableProperties, *, keyed: bool, scope: Scope = "all"
) -> CompactionPolicy:
    """The policy that answers a ``kind`` request of ``scope`` for a table."""
    try:
        kind = Kind(kind)
    except ValueError:
        raise ConfigError(
            f"unknown compaction kind {kind!r} (use 'major', 'minor' or 'full')"
        ) from None
    if not keyed:
        return BinPack(everything=kind is Kind.FULL)
    if kind is Kind.BIN_PACK:
        raise ConfigError("bin-pack is for tables without a primary key; use 'major'")
    chosen = REGISTRY[scope, kind]
    if scope == "due" and properties.window is not None:
        chosen = OffPeak(chosen, properties.window)
    return chosen


def plan(
    table: TableSchema,
    properties: TableProperties,
    partition_key: str,
    max_merged_seq: int,
    files: Sequence[FileEntry],
    kind: Kind | str = Kind.MAJOR,
    *,
    scope: Scope = "all",
    now: dt.datetime | None = None,
    schema_budget: int = 0,
) -> PlanDraft | None:
    """The plan the registry's policy makes for one partition, or None."""
    policy = policy_for(kind, properties, keyed=table.keyed, scope=scope)
    partition = PartitionFiles(
        table, properties, partition_key, max_merged_seq, files, schema_budget, now
    )
    return policy.plan(partition)


__all__ = [
    "REGISTRY",
    "BinPack",
    "CompactionPolicy",
    "FoldAll",
    "MergeRuns",
    "OffPeak",
    "PartitionFiles",
    "Rebucket",
    "Scope",
    "TieredRuns",
    "plan",
    "policy_for",
]
