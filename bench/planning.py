"""Planning time: ``plan_partition`` over one partition of 100,000 live files (and,
with ``--files 1000000``, a million), built in memory; no database involved.

The partition looks like a long backlog on a big table: 5 % base files (level
``base.buckets``, ~120 MiB each; per node a run of key-disjoint files that together
cover the key space 0..1e12) and 95 % unmerged change files, an insert and a delete
file per node of ``change.buckets`` per commit. Each commit touches a key range of
random position whose width is log-uniform between 1e4 and the whole key space (from
recent, clustered keys to keys spread everywhere), so some base files are untouched
and stay out of the plan, most are rewritten. ``task.max-bytes`` is the default
512 MiB, so large nodes split into key-range tasks. Goal: under 2 s for 100k files.

    .venv/bin/python bench/planning.py                  # 100k files
    .venv/bin/python bench/planning.py --files 1000000  # a million: see README first,
                                                        # the plan may not fit in RAM
    .venv/bin/python bench/planning.py --profile        # cProfile of one planning
    .venv/bin/python bench/planning.py --no-gc          # the cyclic GC's share
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats

import numpy as np
import pyarrow as pa
from harness import best_of  # bench/ is on sys.path when run as a script

from firn.model.files import FileEntry
from firn.model.plans import PlanDraft
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.model.tree import Node

KEY_SPACE = 10**12
MiB = 1 << 20
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())],
)


def partition_files(
    rng: np.random.Generator, n: int, change_buckets: int, base_buckets: int
) -> list[FileEntry]:
    """``n`` live files of one partition (see the module doc)."""
    n_base = max(base_buckets, n // 20)
    per_node = n_base // base_buckets
    files: list[FileEntry] = []
    file_id = 0
    merged_seq = 1
    for i in range(base_buckets):
        cuts = np.sort(rng.choice(KEY_SPACE, per_node - 1, replace=False))
        lows = [0, *(int(c) for c in cuts)]
        highs = [*(int(c) - 1 for c in cuts), KEY_SPACE - 1]
        for lo, hi in zip(lows, highs, strict=True):
            file_id += 1
            size = int(rng.integers(100 * MiB, 128 * MiB))
            files.append(
                FileEntry(
                    file_id, "", "base", "B", Node(base_buckets, i), merged_seq,
                    f"base/B-{base_buckets}-{i}-{file_id}.parquet",
                    size, size // 40, [lo], [hi], 1,
                )
            )  # fmt: skip
    seq = merged_seq
    while len(files) < n:
        seq += 1
        width = int(10 ** rng.uniform(4, 12))
        lo = int(rng.integers(0, KEY_SPACE - width + 1))
        for i in range(change_buckets):
            for file_type in ("I", "D"):
                if len(files) >= n:
                    break
                file_id += 1
                # Each file's own keys fall inside the commit's range.
                a, b = np.sort(rng.integers(lo, lo + width, 2))
                rows = int(rng.integers(100, 20_000))
                size = rows * (60 if file_type == "I" else 16)
                files.append(
                    FileEntry(
                        file_id, "", "change", file_type, Node(change_buckets, i), seq,
                        f"change/{file_type}-{change_buckets}-{i}-{file_id}.parquet",
                        size, rows, [int(a)], [int(b)], seq,
                    )
                )  # fmt: skip
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--change-buckets", type=int, default=4)
    parser.add_argument("--base-buckets", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run")
    parser.add_argument(
        "--no-gc", action="store_true", help="time with the cyclic GC off (shows its share)"
    )
    args = parser.parse_args()
    table = TableSchema.build("bench_planning", SCHEMA, ["id"])
    properties = TableProperties.parse(
        {"change.buckets": args.change_buckets, "base.buckets": args.base_buckets}
    )
    files = partition_files(
        np.random.default_rng(3), args.files, args.change_buckets, args.base_buckets
    )
    base = sum(f.store == "base" for f in files)
    drafts: list[PlanDraft | None] = [None]

    def plan() -> None:
        drafts[0] = None  # one plan alive at a time: large plans are large
        drafts[0] = plan(table, properties, "", 1, files)

    if args.no_gc:
        gc.disable()
    seconds = best_of(args.runs, plan)
    gc.enable()
    draft = drafts[0]
    assert draft is not None
    print(
        f"{len(files):,} files ({base:,} base at level {args.base_buckets}, "
        f"{len(files) - base:,} change at level {args.change_buckets}, "
        f"{draft.to_seq - 1:,} commits)"
    )
    entries = sum(len(t.change_files) for t in draft.tasks)
    print(
        f"plan: {len(draft.tasks):,} tasks, "
        f"{sum(len(t.base_files) for t in draft.tasks):,} base files rewritten, "
        f"{len(draft.untouched_base_files):,} untouched; change files listed "
        f"{entries:,} times in all (up to {max(len(t.change_files) for t in draft.tasks):,} "
        "per task)"
    )
    verdict = ""
    if args.files == 100_000:
        verdict = f"; goal < 2 s: {'met' if seconds < 2.0 else 'MISSED'}"
    gc_note = ", cyclic GC off" if args.no_gc else ""
    print(f"plan_partition: {seconds:.2f} s (best of {args.runs}{gc_note}){verdict}")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(plan, table, properties, "", 1, files)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(15)


if __name__ == "__main__":
    main()
