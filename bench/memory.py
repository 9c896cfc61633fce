"""Peak memory of one compaction task whose change rows are several times the
executor memory budget: the kernel must spill sorted runs and stay near the budget.

The table is keyed by an int64 ``id``, with an int64 ``qty`` and a 240-character
string ``payload`` (a random 24-digit head, then repeated text: large in Arrow memory,
small on disk). Setup (not timed): 5M change rows in 10 commits (90 % upserts, 10 %
deletes, keys drawn from 0..4M so many keys change several times), about 1.2 GiB in
Arrow, about 5x the default 256 MiB budget; the planner's one task covers them all
(``base.buckets = change.buckets = 1``, no base files yet).

The task then runs in a fresh Python process (``run_task`` with
``KernelLimits(memory_budget)``), which reports its resident set after its imports
(the baseline) and its peak (``VmHWM`` from /proc; not ``ru_maxrss``, which Linux
carries over from the parent process across fork+exec). PASS when the
peak stays under budget + 512 MiB. The rows written are checked against the live key
count computed from the generated change sets. The Arrow memory pool is the
default one (``ARROW_DEFAULT_MEMORY_POOL`` in the environment picks another).

    .venv/bin/python bench/memory.py                     # budget 256 MiB, 5M rows
    .venv/bin/python bench/memory.py --rows 1000000 --budget-mib 64
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("payload", pa.string()),
    ]
)
HEADROOM = 512 << 20
MiB = 1 << 20
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit; "


def child(spec_path: str, budget: int, spill_dir: str) -> None:
    """Run the task in this (fresh) process and print what it measured, as JSON."""
    from harness import status_bytes  # bench/ is on sys.path when run as a script

    from firn.engine.kernel import KernelLimits, run_task
    from firn.model.schema import TableSchema
    from firn.model.tasks import TaskSpec

    spec = TaskSpec.from_json(Path(spec_path).read_text())
    table = TableSchema.build("bench_memory", SCHEMA, ["id"])
    baseline = status_bytes("VmRSS")
    result = run_task(table, spec, 1, KernelLimits(memory_budget=budget, spill_dir=spill_dir))
    report = {
        "baseline_rss": baseline,
        "vm_hwm": status_bytes("VmHWM"),
        "spilled_runs": result.spilled_runs,
        "rows_read": result.rows_read,
        "rows_written": result.rows_written,
        "outputs": len(result.outputs),
        "seconds": result.seconds,
    }
    print(json.dumps(report))


def change_set(rng: np.random.Generator, n: int, keys: int, width: int) -> pa.Table:
    upserts = n * 9 // 10
    ops = np.array(["U"] * upserts + ["D"] * (n - upserts))[rng.permutation(n)]
    head = pc.utf8_lpad(pc.cast(pa.array(rng.integers(0, 10**18, n)), pa.string()), 24, "0")
    filler = (FILLER * (width // len(FILLER) + 1))[: width - 24]
    return pa.table(
        {
            "id": pa.array(rng.integers(0, keys, n)),
            "qty": pa.array(rng.integers(0, 1000, n)),
            "payload": pc.binary_join_element_wise(head, filler, ""),
            "_op": pa.array(ops, pa.string()),
        }
    )


def live_keys(batches_ids: list[np.ndarray], batches_ops: list[np.ndarray]) -> int:
    """Keys whose last change (in commit, then row order) is an upsert."""
    ids = np.concatenate(batches_ids)[::-1]
    upsert = np.concatenate(batches_ops)[::-1]
    _, last = np.unique(ids, return_index=True)
    return int(upsert[last].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="change rows in all")
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--width", type=int, default=240, help="payload characters")
    parser.add_argument("--budget-mib", type=int, default=256)
    parser.add_argument(
        "--child", nargs=3, metavar=("SPEC", "BUDGET", "SPILL"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        spec_path, budget, spill_dir = args.child
        child(spec_path, int(budget), spill_dir)
        return

    from harness import (  # bench/ is on sys.path when run as a script
        bench_catalog,
        child_report,
        one_task,
    )

    budget = args.budget_mib * MiB
    rng = np.random.default_rng(5)
    properties = {"base.buckets": 1, "change.buckets": 1, "task.max-bytes": "1TiB"}
    with bench_catalog() as catalog, tempfile.TemporaryDirectory(prefix="firn-bench-mem-") as tmp:
        table = catalog.create_table("bench_memory", SCHEMA, ["id"], properties=properties)
        arrow_bytes = 0
        ids, ops = [], []
        began = time.perf_counter()
        for part in np.array_split(np.arange(args.rows), args.commits):
            batch = change_set(rng, len(part), args.rows * 4 // 5, args.width)
            arrow_bytes += batch.nbytes
            ids.append(batch.column("id").to_numpy())
            ops.append(pc.equal(batch.column("_op"), "U").to_numpy())
            table.commit(batch)
            del batch
        expected = live_keys(ids, ops)
        spec = one_task(table)
        print(
            f"setup: {args.rows:,} change rows in {args.commits} commits "
            f"({len(spec.change_files)} files, {spec.input_bytes / MiB:.0f} MiB on disk, "
            f"{arrow_bytes / MiB:.0f} MiB in Arrow = {arrow_bytes / budget:.1f}x the budget) "
            f"in {time.perf_counter() - began:.1f} s"
        )
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(spec.to_json())
        spill_dir = Path(tmp) / "spill"
        spill_dir.mkdir()
        report = child_report(__file__, str(spec_path), str(budget), str(spill_dir))

    limit = budget + HEADROOM
    # VmHWM is the peak of this process's own address space. ru_maxrss is not: Linux
    # carries it over from the parent across fork+exec, so it reports the bench
    # process's own peak (the generated data) whenever that is higher.
    peak = report["vm_hwm"]
    print(f"{'budget':<26} {budget / MiB:8.0f} MiB")
    print(f"{'limit (budget + 512 MiB)':<26} {limit / MiB:8.0f} MiB")
    print(f"{'child RSS after imports':<26} {report['baseline_rss'] / MiB:8.0f} MiB")
    above = (peak - report["baseline_rss"]) / MiB
    print(f"{'child peak RSS':<26} {peak / MiB:8.0f} MiB  (above baseline: {above:.0f} MiB)")
    print(f"{'spilled runs':<26} {report['spilled_runs']:8d}")
    print(
        f"{'task':<26} {report['seconds']:8.1f} s, {report['rows_read']:,} rows read, "
        f"{report['rows_written']:,} written in {report['outputs']} file(s)"
    )
    ok_rows = report["rows_written"] == expected
    print(
        f"check: {expected:,} live keys expected, rows written {'match' if ok_rows else 'DIFFER'}"
    )
    print(f"peak vs limit: {'PASS' if peak <= limit else 'FAIL'} ({peak / limit:.0%} of the limit)")


if __name__ == "__main__":
    main()
