"""What a fleet table's fold costs, and how much of it is fixed per plan (issue 37).

Creates --tables small keyed tables like `bench/fleet.py`'s (4 partitions, 200-row
change sets over --keys ids, a tenth deletes), commits --commits change sets to
each, then folds each table with `firn.compact(table, engine="local")`: in this
process, through the same steps the services take (plan, release, claim, merge,
record, commit), without Kafka. Each table's partitions fold as one plan each.

The floor in the same run: tables of one partition that take the same change sets
(so one plan folds as many rows as the four did). If a plan's cost grew with what
it folds, both would cost about the same per table; if it is mostly fixed, the
table of four partitions costs about four times as much.

    .venv/bin/python bench/plan_cost.py                       # ~1 min
    .venv/bin/python bench/plan_cost.py --tables 60 --statements

Prints ms per table and per plan (best of --repeat rounds), and with --statements
the catalog statements per plan (counted at the client: each `execute`; a batched
insert through `executemany` is not counted). JSON on stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import fleet_producer as fleet
import psycopg
from harness import bench_catalog  # bench/ is on sys.path when run as a script

import firn


@contextmanager
def counting_statements() -> Iterator[collections.Counter[str]]:
    """Counts every statement run through a psycopg cursor's `execute` while open
    (`executemany` batches, such as a plan's task rows, are not counted)."""
    counts: collections.Counter[str] = collections.Counter()
    original = psycopg.Cursor.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else repr(query)
        counts[" ".join(text.split())[:90]] += 1
        return original(self, query, *args, **kwargs)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]


def tables_with_changes(
    catalog: firn.Catalog, tag: str, partitions: int, args: argparse.Namespace
) -> list[firn.Table]:
    spec = fleet.ProducerSpec(
        index=0,
        tables=(),
        rate=1.0,
        duration=1.0,
        batch=args.batch,
        keys=args.keys,
        partitions=partitions,
        delete_ratio=0.1,
        seed=args.seed,
    )
    rng = random.Random(args.seed)
    tables = []
    for i in range(args.tables):
        table = catalog.create_table(
            f"{tag}_{i}",
            fleet.SCHEMA,
            list(fleet.PRIMARY_KEY),
            list(fleet.PARTITION_BY),
            {"major.change-bytes-lowest": "64KiB"},
        )
        model: fleet.Model = {}
        for _ in range(args.commits):
            changes, ops = fleet.make_changes(rng, model, spec)
            fleet.apply(model, ops)
            table.commit(changes)
        tables.append(table)
    return tables


def fold_all(tables: list[firn.Table]) -> tuple[float, int]:
    """Seconds to fold every table, and the plans that took."""
    began = time.perf_counter()
    plans = 0
    for table in tables:
        plans += len(firn.compact(table, engine="local")["plans"])
    return time.perf_counter() - began, plans


def one_case(catalog: firn.Catalog, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    best: dict[str, Any] | None = None
    for round_ in range(args.repeat):
        tables = tables_with_changes(catalog, f"p{partitions}_r{round_}", partitions, args)
        fold_all(tables[:1])  # the first fold of a process pays for imports and caches
        with counting_statements() as counts:
            seconds, plans = fold_all(tables[1:])
        folded = len(tables) - 1
        case = {
            "partitions": partitions,
            "tables": folded,
            "plans": plans,
            "ms_per_table": round(seconds / folded * 1000, 2),
            "ms_per_plan": round(seconds / max(plans, 1) * 1000, 2),
            "statements_per_plan": round(sum(counts.values()) / max(plans, 1), 1),
        }
        if args.statements:
            case["statements"] = {q: round(n / max(plans, 1), 2) for q, n in counts.most_common()}
        if best is None or case["ms_per_table"] < best["ms_per_table"]:
            best = case
    assert best is not None
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=41, help="tables per case (the first warms)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per fleet table")
    parser.add_argument("--commits", type=int, default=5, help="change sets per table, then a fold")
    parser.add_argument("--batch", type=int, default=200, help="rows per change set")
    parser.add_argument("--keys", type=int, default=2000, help="ids per table")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per case; the best is kept")
    parser.add_argument("--statements", action="store_true", help="list the statements per plan")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.tables < 2:
        parser.error("--tables must be at least 2 (the first one warms up)")

    with bench_catalog() as catalog:
        fleet_case = one_case(catalog, args.partitions, args)
        floor = one_case(catalog, 1, args)
    out = {
        "benchmark": "bench/plan_cost.py",
        "command": "bench/plan_cost.py " + " ".join(sys.argv[1:]),
        "fleet_table": fleet_case,
        "one_partition": floor,
        "table_vs_one_partition": round(fleet_case["ms_per_table"] / floor["ms_per_table"], 2),
        "plan_vs_one_partition_plan": round(fleet_case["ms_per_plan"] / floor["ms_per_plan"], 2),
    }
    print(json.dumps(out, indent=2))
    print(
        f"a table of {args.partitions} partitions: {fleet_case['ms_per_table']} ms to fold "
        f"({fleet_case['plans'] / fleet_case['tables']:.1f} plans, {fleet_case['ms_per_plan']} ms "
        f"and {fleet_case['statements_per_plan']} statements each); the same rows in one "
        f"partition: {floor['ms_per_table']} ms ({out['table_vs_one_partition']}x)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
