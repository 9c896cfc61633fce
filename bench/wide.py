"""Wide tables: a major compaction of a table of 200 value columns, merged vertically
(keys first, then a group of value columns at a time: ``firn.engine.vertical``)
against row by row, and a 3-column scan of the table against the same scan of a
table of just those 3 columns.

Setup (not timed): a table keyed by an int64 ``id`` with ``--columns`` value columns
(float64; every tenth an int64, every twentieth a short string), ``--rows`` rows bulk
loaded (``Table.load``) at ``base.buckets`` 1, then ``--commits`` change sets of
``--changes`` rows in all (90 % upserts of existing and new keys, 10 % deletes). The
planner's one major task covers it all.

1. **compaction**: the task runs twice, each time in a fresh process (``run_task``,
   the services' default 1 GiB memory budget): vertical (``vertical_group`` =
   ``--group``) and row by row (0). Printed: each one's time and peak resident memory
   above the process's baseline (``VmHWM``, see ``harness.status_bytes``). The two
   outputs are checked equal (every column).
2. **scan**: the table compacted (``firn.compact``), ``scan(columns=[id, v000, v001])
   .to_arrow()`` against the same scan of a table of only those columns that took the
   same load, changes and compaction: best of ``--repeat``.

    .venv/bin/python bench/wide.py                        # 500k rows, 200 columns
    .venv/bin/python bench/wide.py --rows 1000000 --group 4 8 16   # each group size
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

MiB = 1 << 20
SCANNED = ["id", "v000", "v001"]


def value_type(n: int) -> pa.DataType:
    if n % 20 == 19:
        return pa.string()
    return pa.int64() if n % 10 == 9 else pa.float64()


def wide_schema(columns: int) -> pa.Schema:
    fields = [pa.field(f"v{n:03d}", value_type(n)) for n in range(columns)]
    return pa.schema([pa.field("id", pa.int64(), nullable=False), *fields])


def wide_rows(rng: np.random.Generator, ids: np.ndarray, schema: pa.Schema) -> pa.Table:
    n = len(ids)
    columns: list[pa.Array] = [pa.array(ids)]
    for field in schema:
        if field.name == "id":
            continue
        if pa.types.is_string(field.type):
            columns.append(pa.array(np.char.add("s", (rng.integers(0, 1000, n)).astype(str))))
        elif pa.types.is_integer(field.type):
            columns.append(pa.array(rng.integers(0, 1 << 40, n)))
        else:
            columns.append(pa.array(rng.random(n)))
    return pa.Table.from_arrays(columns, schema=schema)


def change_sets(
    rng: np.random.Generator, base_rows: int, commits: int, changes: int, schema: pa.Schema
) -> list[pa.Table]:
    sets = []
    for _ in range(commits):
        n = changes // commits
        ids = rng.integers(0, base_rows + base_rows // 10, n)
        rows = wide_rows(rng, ids, schema)
        ops = np.where(rng.random(n) < 0.9, "U", "D")
        sets.append(rows.append_column("_op", pa.array(ops)))
    return sets


def child(spec_path: str, group: int, out_path: str) -> None:
    """Run the task in this (fresh) process; print what it measured, as JSON."""
    import dataclasses

    from harness import status_bytes  # bench/ is on sys.path when run as a script

    from firn.engine.kernel import KernelLimits, run_task
    from firn.model.schema import TableSchema
    from firn.model.tasks import TaskSpec

    spec = TaskSpec.from_json(Path(spec_path).read_text())
    spec = dataclasses.replace(spec, vertical_group=group)
    assert spec.table is not None
    table = TableSchema.from_dict(spec.table)
    baseline = status_bytes("VmRSS")
    result = run_task(table, spec, 1 + group, KernelLimits())
    if not result.ok:
        raise SystemExit(result.error)
    Path(out_path).write_text(json.dumps([o.path for o in result.outputs]))
    report = {
        "baseline_rss": baseline,
        "vm_hwm": status_bytes("VmHWM"),
        "seconds": result.seconds,
        "rows_written": result.rows_written,
        "outputs": len(result.outputs),
    }
    print(json.dumps(report))


def run_child(spec_path: Path, group: int, tmp: Path) -> tuple[dict[str, Any], list[str]]:
    from harness import child_report  # bench/ is on sys.path when run as a script

    out_path = tmp / f"outputs-{group}.json"
    report = child_report(__file__, str(spec_path), str(group), str(out_path))
    return report, json.loads(out_path.read_text())


def outputs(table: Any, paths: list[str]) -> pa.Table:
    """A task's output files, read back in order."""
    return pa.concat_tables([table.storage.read_parquet(p) for p in paths])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500_000, help="base rows")
    parser.add_argument("--columns", type=int, default=200, help="value columns")
    parser.add_argument("--changes", type=int, default=100_000, help="change rows in all")
    parser.add_argument("--commits", type=int, default=5)
    parser.add_argument(
        "--group", type=int, nargs="+", default=[8], help="value columns per group (several: each)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--child", nargs=3, metavar=("SPEC", "GROUP", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        spec_path, group, out_path = args.child
        child(spec_path, int(group), out_path)
        return

    from harness import bench_catalog, best_of, one_task  # bench/ is on sys.path as a script

    import firn

    rng = np.random.default_rng(200)
    schema = wide_schema(args.columns)
    properties = {"base.buckets": 1, "change.buckets": 1, "task.max-bytes": "1TiB"}
    with bench_catalog() as catalog, tempfile.TemporaryDirectory(prefix="firn-bench-wide-") as tmp:
        began = time.perf_counter()
        wide = catalog.create_table("bench_wide", schema, ["id"], properties=properties)
        narrow_schema = pa.schema([schema.field(c) for c in SCANNED])
        narrow = catalog.create_table("bench_narrow", narrow_schema, ["id"], properties=properties)
        base = wide_rows(rng, np.arange(args.rows, dtype=np.int64), schema)
        arrow_mib = base.nbytes / MiB
        wide.load(base)
        narrow.load(base.select(SCANNED))
        del base
        for rows in change_sets(rng, args.rows, args.commits, args.changes, schema):
            wide.commit(rows)
            narrow.commit(rows.select([*SCANNED, "_op"]))
        spec = one_task(wide)
        print(
            f"setup: {args.rows:,} rows x {args.columns} value columns ({arrow_mib:.0f} MiB in "
            f"Arrow), {args.changes:,} changes in {args.commits} commits; one task reading "
            f"{len(spec.base_files)} base and {len(spec.change_files)} change files "
            f"({spec.input_bytes / MiB:.0f} MiB); {time.perf_counter() - began:.1f} s",
            flush=True,
        )
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(spec.to_json())
        reports, written = {}, {}
        runs = [*((f"vertical {g}", g) for g in args.group), ("row-wise", 0)]
        for name, group in runs:
            reports[name], written[name] = run_child(spec_path, group, Path(tmp))
        expected = outputs(wide, written["row-wise"])
        same = all(outputs(wide, written[name]).equals(expected) for name, _ in runs[:-1])
        del expected

        summary = firn.compact(wide, engine="local")
        if summary["failed_attempts"]:
            raise SystemExit(f"compaction failed: {summary['errors']}")
        firn.compact(narrow, engine="local")
        wide_scan = best_of(args.repeat, lambda: wide.scan(columns=SCANNED).to_arrow())
        narrow_scan = best_of(args.repeat, lambda: narrow.scan(columns=SCANNED).to_arrow())
        if (
            not wide.scan(columns=SCANNED)
            .to_arrow()
            .sort_by("id")
            .equals(narrow.scan(columns=SCANNED).to_arrow().sort_by("id"))
        ):
            raise SystemExit("the 3-column scans of the two tables differ")

    print("\nmajor compaction, one task (vertical N: N value columns per group):")
    print(f"{'merge':<12} {'seconds':>8} {'peak MiB':>9} {'vs row-wise':>24} {'files':>6}")
    row_wise = reports["row-wise"]
    base_peak = row_wise["vm_hwm"] - row_wise["baseline_rss"]
    for name, r in reports.items():
        peak = r["vm_hwm"] - r["baseline_rss"]
        versus = f"{r['seconds'] / row_wise['seconds']:.2f}x time, {peak / base_peak:.2f}x memory"
        print(f"{name:<12} {r['seconds']:8.2f} {peak / MiB:9.0f} {versus:>24} {r['outputs']:6d}")
    print(f"rows written: {row_wise['rows_written']:,}; outputs {'equal' if same else 'DIFFER'}")
    print(f"\n3-column scan after compaction (best of {args.repeat}):")
    print(
        f"  {args.columns}-column table {wide_scan:.3f} s, 3-column table {narrow_scan:.3f} s: "
        f"{wide_scan / narrow_scan:.2f}x"
    )
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
