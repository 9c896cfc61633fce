"""A producer process for the concurrency test (importable, so ``spawn`` can run it)."""

from __future__ import annotations

import random
from typing import Any

import firn
from firn.settings import FirnSettings
from tests.changesets import KEY_KINDS, as_change_set, table_schema

KIND = KEY_KINDS[0]


def random_ops(rng: random.Random, size: int) -> list[dict[str, Any]]:
    ops = []
    for _ in range(size):
        op = rng.choice("UUD")
        ops.append(
            {
                "part": rng.choice("ab"),
                "k": KIND.value(rng.randrange(24)),
                "qty": rng.randrange(1000) if op == "U" else None,
                "label": rng.choice([None, "x", "y"]) if op == "U" else None,
                "price": None,
                "_op": op,
            }
        )
    return ops


def produce(
    settings_values: dict[str, Any], table: str, worker: int, commits: int
) -> list[tuple[int, list[dict[str, Any]]]]:
    """Commit ``commits`` random change sets; returns (seq, operations) of each."""
    settings = FirnSettings(**settings_values)
    rng = random.Random(worker)
    done = []
    with firn.connect(settings=settings) as catalog:
        handle = catalog.table(table)
        for _ in range(commits):
            ops = random_ops(rng, rng.randrange(1, 20))
            seq = handle.commit(as_change_set(ops, table_schema(KIND)))
            done.append((seq, ops))
    return done
