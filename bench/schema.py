"""Schema evolution's two costs: the bytes compaction rewrites after a schema change,
and reading a table whose files span several schema versions.

1. **Rewrites after a change.** A keyed table is loaded (``--rows`` rows, 4
   partitions), then goes through rounds: each round commits ``--commits`` change
   sets of ``--batch`` random upserts and deletes (of keys drawn from all of them, or
   with ``--hot 0.05`` from one in twenty, spread over every file: folds then keep
   the old files with deletion vectors instead of rewriting them), then compacts as
   the services do
   (``firn.compact(kind="auto")``: only partitions whose triggers fire, planned unit
   by unit). After ``--before`` rounds a column is added (with a default) and one is
   renamed; ``--after`` rounds follow. Three variants from the same seed:

   - ``progressive``: ``schema.rewrite-ratio`` 1 (the default): major plans rewrite
     old-version base files worth what the partition's compaction wrote since the
     change (``--ratio`` for another value);
   - ``at once``: the rule off, and a full compaction right after the change (the
     one-shot rewrite the progressive rule replaces);
   - ``never``: the rule off and nothing else (old files stay; the normal rate).

   The table's normal compaction after the change is the ``never`` run's (same
   workload, same rounds, nothing rewritten for the schema): its bytes per round,
   its peak round and its peak over any ``--window`` consecutive rounds. For the
   other two: the same peaks against the normal ones (goal: no burst above them),
   the extra bytes in all, and the rounds until no base file of an older version is
   left.
2. **Reads across versions.** A 5-partition table whose partitions were loaded under
   five successive schema versions, read whole,
   by a column subset and through a filter, against the same table after a full
   compaction (every file of the latest version), in the same run (goal: within 1.2x).

    .venv/bin/python bench/schema.py      # FIRN_DATABASE_URL, or a throwaway local Postgres
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
import pyarrow as pa
from harness import bench_catalog, best_of  # bench/ is on sys.path when run as a script

import firn

MiB = 1 << 20
REGIONS = ["r0", "r1", "r2", "r3"]
SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int32()),
        pa.field("label", pa.string()),
        pa.field("price", pa.float64()),
    ]
)
PROPERTIES = {
    "change.buckets": 4,
    "base.buckets": 4,
    "target-file-size": "8MiB",
    "major.change-ratio": 0.05,
}


def rows(
    rng: np.random.Generator, ids: np.ndarray, schema: pa.Schema, regions: list[str] = REGIONS
) -> pa.Table:
    """Rows for ``ids`` with random values, in ``schema``'s columns (value columns by type)."""
    n = len(ids)
    columns: dict[str, Any] = {
        "region": pa.array(np.array(regions)[ids % len(regions)]),
        "id": pa.array(ids, pa.int64()),
    }
    for field in schema:
        if field.name in columns:
            continue
        if pa.types.is_integer(field.type):
            columns[field.name] = pa.array(rng.integers(0, 10_000, n), field.type)
        elif pa.types.is_floating(field.type):
            columns[field.name] = pa.array(rng.random(n), field.type)
        else:
            columns[field.name] = pa.array([f"v-{v:06d}" for v in rng.integers(0, 10**6, n)])
    return pa.table(columns, schema=pa.schema([schema.field(c) for c in columns]))


def change_set(
    rng: np.random.Generator, table: firn.Table, keys: int, batch: int, hot: float
) -> pa.Table:
    """Random upserts (10 % deletes) of keys drawn from about every ``1 / hot``-th key
    (one of each run of ``1 / hot`` keys, in every partition)."""
    step = max(1, round(1 / hot))
    ids = rng.choice(keys // step, batch, replace=False) * step
    if step > 1:
        ids += rng.integers(0, min(step, len(REGIONS)), batch)  # every partition changes
    upserts = rows(rng, ids, table.schema)
    ops = np.where(rng.random(batch) < 0.1, "D", "U")
    return upserts.append_column("_op", pa.array(ops))


def written(summary: dict[str, Any]) -> int:
    return sum(p["added_bytes"] for p in summary["plans"] if p["outcome"] == "committed")


def old_base_bytes(table: firn.Table) -> int:
    return sum(
        r["size"]
        for r in table.files().to_pylist()
        if r["store"] == "base" and r["schema_id"] != table.schema_id
    )


def rewrite_run(catalog: firn.Catalog, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    share = args.ratio if variant == "progressive" else 0.0
    table = catalog.create_table(
        f"rewrites_{variant.replace(' ', '_')}",
        SCHEMA,
        ["region", "id"],
        ["region"],
        {**PROPERTIES, "schema.rewrite-ratio": share},
    )
    keys = args.rows * 2
    table.load(rows(rng, rng.choice(keys, args.rows, replace=False), SCHEMA))
    per_round: list[int] = []
    converged_at = None
    for n in range(args.before + args.after):
        if n == args.before:
            with table.update_schema() as u:
                u.add_column("discount", pa.float64(), default=0.0)
                u.rename_column("label", "title")
            if variant == "at once":
                per_round.append(written(firn.compact(table, kind="full", engine="local")))
                continue
        for _ in range(args.commits):
            table.commit(change_set(rng, table, keys, args.batch, args.hot))
        per_round.append(written(firn.compact(table, kind="auto", engine="local")))
        if n >= args.before and converged_at is None and old_base_bytes(table) == 0:
            converged_at = n - args.before + 1
        print(f"  {variant}: round {n + 1}: {per_round[-1] / MiB:.1f} MiB", file=sys.stderr)
    return {
        "variant": variant,
        "rounds_to_converge": converged_at,
        "old_base_left_mib": round(old_base_bytes(table) / MiB, 2),
        "per_round": per_round,
    }


def window_peak(per_round: list[int], window: int) -> int:
    return max(sum(per_round[i : i + window]) for i in range(max(1, len(per_round) - window + 1)))


def summarize(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each variant's bytes after the change against the ``never`` run's (the normal rate)."""
    normal = next(r for r in runs if r["variant"] == "never")["per_round"][args.before :]
    out = []
    for run in runs:
        after = run.pop("per_round")[args.before :]
        out.append(
            {
                **run,
                "after_mib": round(sum(after) / MiB, 2),
                "extra_mib": round((sum(after) - sum(normal)) / MiB, 2),
                "peak_round_mib": round(max(after) / MiB, 2),
                "peak_round_vs_normal": round(max(after) / max(normal), 2),
                "peak_window_mib": round(window_peak(after, args.window) / MiB, 2),
                "peak_window_vs_normal": round(
                    window_peak(after, args.window) / window_peak(normal, args.window), 2
                ),
                "per_round_mib": [round(b / MiB, 2) for b in after],
            }
        )
    return out


def read_run(catalog: firn.Catalog, args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    table = catalog.create_table(
        "versions",
        SCHEMA,
        ["region", "id"],
        ["region"],
        {**PROPERTIES, "target-file-size": "64MiB"},
    )
    changes = [
        lambda u: u.add_column("discount", pa.float64(), default=0.0),
        lambda u: u.rename_column("label", "title"),
        lambda u: u.update_column("qty", field_type=pa.int64()),
        lambda u: u.add_column("note", pa.string(), default="none"),
    ]
    regions = [*REGIONS, "r4"]
    per_part = args.read_rows // len(regions)
    for i, region in enumerate(regions):
        if i:
            with table.update_schema() as u:
                changes[i - 1](u)
        ids = np.arange(per_part) * len(regions) + i
        table.load(rows(rng, ids, table.schema, regions), partitions=f"region={region}")
    versions = sorted({r["schema_id"] for r in table.files().to_pylist()})
    reads = {
        "read": lambda: table.read(),
        "columns": lambda: table.scan(columns=["id", "qty", "discount"]).to_arrow(),
        "filter": lambda: table.scan(filter="qty < 1000").to_arrow(),
    }
    spanning = {name: best_of(args.runs, fn) for name, fn in reads.items()}
    expected = table.read().sort_by([("region", "ascending"), ("id", "ascending")])
    firn.compact(table, kind="full", engine="local")
    assert {r["schema_id"] for r in table.files().to_pylist()} == {table.schema_id}
    same = table.read().sort_by([("region", "ascending"), ("id", "ascending")])
    assert same.equals(expected), "the full compaction changed the table"
    single = {name: best_of(args.runs, fn) for name, fn in reads.items()}
    return {
        "rows": expected.num_rows,
        "versions_spanned": versions,
        **{
            name: {
                "spanning_s": round(spanning[name], 3),
                "one_version_s": round(single[name], 3),
                "ratio": round(spanning[name] / single[name], 2),
            }
            for name in reads
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows loaded first")
    parser.add_argument("--commits", type=int, default=2, help="change sets per round")
    parser.add_argument("--batch", type=int, default=20_000, help="rows per change set")
    parser.add_argument("--before", type=int, default=8, help="rounds before the change")
    parser.add_argument("--after", type=int, default=60, help="rounds after the change")
    parser.add_argument("--read-rows", type=int, default=4_000_000)
    parser.add_argument("--runs", type=int, default=5, help="timings per read (best kept)")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--ratio", type=float, default=1.0, help="schema.rewrite-ratio")
    parser.add_argument("--window", type=int, default=8, help="rounds of the peak window")
    parser.add_argument(
        "--hot", type=float, default=1.0, help="share of the keys changes go to (1: all)"
    )
    parser.add_argument("--skip-rewrites", action="store_true")
    parser.add_argument("--skip-reads", action="store_true")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    with bench_catalog() as catalog:
        if not args.skip_rewrites:
            runs = [rewrite_run(catalog, v, args) for v in ("progressive", "at once", "never")]
            report["rewrites"] = summarize(runs, args)
        if not args.skip_reads:
            report["reads"] = read_run(catalog, args)
    print(json.dumps(report, indent=2))
    for r in report.get("rewrites", []):
        print(
            f"{r['variant']:>12}: after the change {r['after_mib']} MiB written "
            f"({r['extra_mib']:+} against never); peak round {r['peak_round_mib']} MiB "
            f"({r['peak_round_vs_normal']}x never's), peak {args.window} rounds "
            f"{r['peak_window_mib']} MiB ({r['peak_window_vs_normal']}x never's); converged "
            f"after {r['rounds_to_converge']} rounds, {r['old_base_left_mib']} MiB old base left",
            file=sys.stderr,
        )
    reads = report.get("reads", {})
    for name in ("read", "columns", "filter") if reads else ():
        r = reads[name]
        print(
            f"{name:>8}: {len(reads['versions_spanned'])} versions {r['spanning_s']}s, "
            f"one version {r['one_version_s']}s: {r['ratio']}x",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
