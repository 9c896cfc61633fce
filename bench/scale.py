"""The same CDC workload at growing base sizes, stage by stage, next to its floors
(issue 38): is every stage's time per million rows flat as the table grows, and is
each stage at its floor?

Per size (``--sizes``, base rows), on one unpartitioned keyed table (int64 key,
int64, float64, 16-char string, timestamp):

1. **load**: ``Table.load`` of the base rows, against delta-rs (``deltalake``)
   writing the same rows to a fresh Delta table, and pyarrow writing them as plain
   Parquet (``pq.write_table``, 1M-row row groups): the floors.
2. **commit**: ``--commits`` change sets of ``--changes`` rows each (80 % upserts
   over 1.2x the base key space, 20 % deletes of base keys).
3. **read before**: ``Table.scan().to_arrow()`` with those changes unmerged.
4. **compact**: ``firn.compact(table, engine="local")`` (a major compaction).
5. **read after**: the same scan of the compacted table, against pyarrow reading the
   same live rows from plain Parquet (the live rows written once by pyarrow, sorted
   by key, as the table's file count in 1M-row row groups; read with
   ``pq.read_table``, threads on).
6. **lookup after**: 20 live keys looked up one by one, ``Table.scan(filter="id =
   k")``, against ``pq.read_table(filters=pc.field("id") == k)`` of those plain files
   (a key's row group found by the statistics): ``lookup_after_ms`` is one lookup.

Reads are the best of ``--repeat``; compactions are timed once (each changes the
table). Loads run in ``--load-rounds`` interleaved rounds, the order of Firn and
delta-rs swapped each round (a load replaces the table, so it can run again), and the
best of each counts: on this VM whichever runs first into memory the guest has not
used lately pays for it (``warm``), and its speed drifts by a third from minute to
minute; each contender's first load, every round and their median are reported too,
and the growth of the median load beside the best's. Every read is checked against
the rows the model says are live (its row count, and the key set at the smallest
size). Each size runs in a fresh process of its own (``--one-process``: all in this
one), so no size runs in a heap an earlier size grew. One JSON object on stdout, per
size: seconds, seconds per million base rows, and each ratio to its floor; ``--out``
writes it too. The file layout after each stage (base files, deletion vectors, row
groups) is reported, so the trade a layout makes is visible. Each timed stage first
touches ``--warm-gib`` of memory (see ``warm``).

    .venv/bin/python bench/scale.py --sizes 5M,20M           # ~5 min
    .venv/bin/python bench/scale.py --sizes 5M,20M,50M --out scale.json
    .venv/bin/python bench/scale.py --sizes 5M,50M --chunk-rows 1M   # row groups' shape
    .venv/bin/python bench/scale.py --property deletion-vectors.max-ratio=0   # the other trade

By default a fold keeps a base file its changes touch and hides the replaced rows
with a deletion vector (``deletion-vectors.max-ratio`` 0.3): little to write, and a
read filters those files' rows. ``deletion-vectors.max-ratio=0`` rewrites every
touched file instead: more to write, and the read needs no filter.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from harness import ORDERS, bench_catalog, order_rows  # bench/ is on sys.path when run as a script
from warm_memory import warm

import firn
from firn.commands.tables import parse_properties

ROW_GROUP = 1 << 20
LOOKUPS = 20
"""Keys looked up one filtered scan at a time after the compaction."""
WARM_GIB = 0.0
"""Memory touched before each timed stage (``--warm-gib``)."""


def change_sets(
    rng: np.random.Generator, base_rows: int, commits: int, changes: int
) -> tuple[list[pa.Table], np.ndarray, np.ndarray]:
    """The change sets, and the keys they leave live and deleted (in commit order: a
    key upserted after its delete lives)."""
    sets = []
    upserted = np.empty(0, np.int64)
    deleted = np.empty(0, np.int64)
    for _ in range(commits):
        ups = int(changes * 0.8)
        up_ids = np.unique(rng.integers(0, base_rows * 6 // 5, ups))
        del_ids = np.setdiff1d(np.unique(rng.integers(0, base_rows, changes - ups)), up_ids)
        batch = order_rows(rng, up_ids).append_column("_op", pa.array(["U"] * len(up_ids)))
        gone = order_rows(rng, del_ids).append_column("_op", pa.array(["D"] * len(del_ids)))
        sets.append(pa.concat_tables([batch, gone]))
        deleted = np.union1d(np.setdiff1d(deleted, up_ids), del_ids)
        upserted = np.union1d(np.setdiff1d(upserted, del_ids), up_ids)
    return sets, upserted, deleted


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    warm(WARM_GIB)
    began = time.perf_counter()
    out = fn()
    took = time.perf_counter() - began
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "")
    print(f"  {name}: {took:.2f} s, peak RSS {peak_rss_gib():.1f} GiB", file=sys.stderr, flush=True)
    return took, out


def delta_write(write_deltalake: Callable[..., None], path: Path, rows: pa.Table) -> None:
    """delta-rs writing ``rows`` as a new Delta table at ``path`` (one there is removed)."""
    shutil.rmtree(path, ignore_errors=True)
    write_deltalake(str(path), rows)


def peak_rss_gib() -> float:
    """This process's peak resident memory so far (a 100M-row run needs more than
    this 24 GiB machine has: the progress lines say how far it got)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def best(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The best time of ``repeat`` runs, and the last run's result. One result is held
    at a time: three whole 50M-row reads held together took 7.5 GiB, the machine then
    evicted the table's files from the page cache, and the best of three reads after
    the compaction took 4.07 s (1.72 s in the next run, holding one)."""
    times, result = [], None
    for _ in range(repeat):
        result = None  # the previous run's rows go before the next run makes its own
        took, result = timed(fn)
        times.append(took)
    return min(times), result


def layout(table: firn.Table) -> dict[str, Any]:
    """The live files: base and change counts, base files with a deletion vector, and
    the base files' row groups."""
    files = table.files().to_pylist()
    base = [f for f in files if f["store"] == "base"]
    groups = 0
    for f in base:
        with table.storage.fs.open_input_file(table.storage.full_path(f["path"])) as handle:
            groups += pq.ParquetFile(handle).metadata.num_row_groups
    return {
        "base_files": len(base),
        "change_files": sum(1 for f in files if f["store"] == "change"),
        "deletion_vectors": sum(1 for f in base if f.get("deletion_vector")),
        "base_row_groups": groups,
    }


def one_size(catalog: firn.Catalog, base_rows: int, args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(base_rows)
    base = order_rows(rng, rng.permutation(base_rows).astype(np.int64))
    if args.chunk_rows:  # the shape a Parquet file's row groups give
        base = pa.Table.from_batches(base.to_batches(max_chunksize=args.chunk_rows))
    base_chunks = base.column(0).num_chunks
    sets, upserted, deleted = change_sets(rng, base_rows, args.commits, args.changes)
    live_keys = np.union1d(np.setdiff1d(np.arange(base_rows), deleted), upserted)
    scratch = Path(tempfile.mkdtemp(prefix="firn-scale-", dir=args.scratch))
    out: dict[str, Any] = {
        "base_rows": base_rows,
        "live_rows": len(live_keys),
        "properties": args.properties,
        "base_chunks": base_chunks,
    }
    try:
        name = f"scale_{base_rows}_{len(catalog.tables())}"
        table = catalog.create_table(name, ORDERS, ["id"], [], args.properties)
        try:
            from deltalake import write_deltalake
        except ImportError:
            hint = "scale.py needs delta-rs: .venv/bin/pip install -e '.[bench]'"
            raise SystemExit(hint) from None

        loads: dict[str, list[float]] = {"load_s": [], "delta_load_s": []}
        contenders: list[tuple[str, Callable[[], Any]]] = [
            ("load_s", functools.partial(table.load, base)),
            (
                "delta_load_s",
                functools.partial(delta_write, write_deltalake, scratch / "delta", base),
            ),
        ]
        for round_ in range(args.load_rounds):
            for key, load in contenders if round_ % 2 == 0 else contenders[::-1]:
                loads[key].append(timed(load)[0])
        for key, times in loads.items():
            out[key] = min(times)
            out[f"first_{key}"] = times[0]
            out[f"median_{key}"] = float(np.median(times))
            out[f"rounds_{key}"] = times
        out["layout_loaded"] = layout(table)
        plain_write = functools.partial(
            pq.write_table, base, scratch / "plain.parquet", row_group_size=ROW_GROUP
        )
        out["parquet_write_s"], _ = timed(plain_write)
        del base

        began = time.perf_counter()
        for batch in sets:
            table.commit(batch)
        out["commit_s"] = time.perf_counter() - began
        del sets

        def scan() -> pa.Table:
            return table.scan().to_arrow()

        out["read_before_s"], before = best(args.repeat, scan)
        check(before, live_keys, base_rows <= args.check_keys_up_to, "before")
        del before
        out["layout_before"] = layout(table)

        out["compact_s"], summary = timed(functools.partial(firn.compact, table, engine="local"))
        if summary["failed_attempts"]:
            raise SystemExit(f"compaction failed: {summary['errors']}")
        out["read_after_s"], after = best(args.repeat, scan)
        check(after, live_keys, base_rows <= args.check_keys_up_to, "after")
        out["layout_after"] = layout(table)

        wanted = rng.choice(live_keys, LOOKUPS, replace=False)
        out["lookup_after_s"], found = best(args.repeat, functools.partial(lookup, table, wanted))
        check_found(found, wanted, "Firn")

        # The floor: the same live rows as plain Parquet, in as many files, sorted by
        # key (so each lookup's filter leaves one row group of one file, as it can).
        files = max(1, out["layout_after"]["base_files"])
        plain = scratch / "plain-live"
        plain.mkdir()
        after = after.sort_by("id")
        step = -(-after.num_rows // files)
        for n in range(files):
            part = after.slice(n * step, step)
            pq.write_table(part, plain / f"{n:05d}.parquet", row_group_size=ROW_GROUP)
        del after
        paths = sorted(str(p) for p in plain.iterdir())
        out["plain_read_s"], _ = best(args.repeat, functools.partial(pq.read_table, paths))
        plain_lookup = functools.partial(lookup_plain, paths, wanted)
        out["plain_lookup_s"], found = best(args.repeat, plain_lookup)
        check_found(found, wanted, "plain Parquet")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    per_m = base_rows / 1e6
    for stage in ("load", "commit", "read_before", "compact", "read_after"):
        out[f"{stage}_s_per_m"] = out[f"{stage}_s"] / per_m
    out["median_load_s_per_m"] = out["median_load_s"] / per_m
    out["load_vs_delta"] = out["load_s"] / out["delta_load_s"]
    out["read_after_vs_plain"] = out["read_after_s"] / out["plain_read_s"]
    out["read_after_vs_before"] = out["read_after_s"] / out["read_before_s"]
    out["lookup_after_ms"] = out["lookup_after_s"] / LOOKUPS * 1e3
    out["lookup_after_vs_plain"] = out["lookup_after_s"] / out["plain_lookup_s"]
    return out


def lookup(table: firn.Table, keys: np.ndarray) -> list[pa.Table]:
    """Each key's row by a filtered scan of the table, one scan a key (the filter's
    string form, which routes a key to its hash node's files)."""
    return [table.scan(filter=f"id = {int(k)}").to_arrow() for k in keys]


def lookup_plain(paths: list[str], keys: np.ndarray) -> list[pa.Table]:
    """Each key's row by pyarrow reading the plain files with the filter (row groups
    skipped by their statistics)."""
    return [pq.read_table(paths, filters=pc.field("id") == int(k)) for k in keys]


def check_found(found: list[pa.Table], keys: np.ndarray, who: str) -> None:
    got = [t.column("id").to_pylist() for t in found]
    if got != [[int(k)] for k in keys]:
        raise SystemExit(f"lookups by {who}: {got[:3]}..., wanted one row of each key")


def check(read: pa.Table, live_keys: np.ndarray, keys_too: bool, when: str) -> None:
    if read.num_rows != len(live_keys):
        raise SystemExit(f"read {when}: {read.num_rows} rows, the model has {len(live_keys)}")
    if keys_too:
        got = np.sort(read.column("id").to_numpy())
        if not np.array_equal(got, live_keys):
            raise SystemExit(f"read {when}: keys differ from the model's")


def size(text: str) -> int:
    units = {"k": 1_000, "M": 1_000_000}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5M,20M", help="comma list of base row counts")
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--changes", type=size, default=100_000, help="rows per commit")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each read (best kept)")
    parser.add_argument(
        "--load-rounds",
        type=int,
        default=2,
        help="interleaved rounds of the loads (Firn and delta-rs, order swapped each round)",
    )
    parser.add_argument(
        "--chunk-rows",
        type=size,
        default=None,
        help="hand the base rows to the loads in chunks of this many rows, as reading a "
        "Parquet file of row groups that size gives them (default: chunks of 10M rows)",
    )
    parser.add_argument("--check-keys-up-to", type=size, default=size("20M"))
    parser.add_argument("--scratch", default=None, help="where the floors' files go")
    parser.add_argument(
        "--warm-gib",
        type=float,
        default=None,
        help="GiB of memory touched before each timed stage (default: 2x the largest "
        "table's Arrow size; 0 to skip)",
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a table property over the defaults (repeatable), e.g. "
        "deletion-vectors.max-ratio=0 to rewrite every base file a fold touches",
    )
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="run every size in this process (default: each size in a fresh one)",
    )
    args = parser.parse_args()
    args.properties = parse_properties(args.property)
    global WARM_GIB
    largest = max(size(text) for text in args.sizes.split(","))
    WARM_GIB = args.warm_gib if args.warm_gib is not None else 2 * largest * 52 / (1 << 30)
    sizes = args.sizes.split(",")
    results = []
    if len(sizes) > 1 and not args.one_process:
        # Each size in a fresh process: the smaller sizes' work leaves the allocator's
        # heap and the guest's memory in a state that taxes the next size , and
        # growth is about the workload, not about what ran before it.
        for text in sizes:
            results.append(_size_in_fresh_process(text))
    else:
        with bench_catalog() as catalog:
            for text in sizes:
                result = one_size(catalog, size(text), args)
                print(json.dumps(result), flush=True)
                results.append(result)
    if len(results) > 1:
        first = results[0]
        for r in results[1:]:
            r["growth_vs_smallest"] = {
                stage: r[f"{stage}_s_per_m"] / first[f"{stage}_s_per_m"]
                for stage in ("load", "commit", "read_before", "compact", "read_after")
            }
            # The best load of a few rounds at the smallest size is the luckiest of
            # short runs, so the median rounds' growth is printed beside it.
            r["growth_vs_smallest"]["median_load"] = (
                r["median_load_s_per_m"] / first["median_load_s_per_m"]
            )
            print(json.dumps({"base_rows": r["base_rows"], **r["growth_vs_smallest"]}))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    sys.exit(0)


def _size_in_fresh_process(text: str) -> dict[str, Any]:
    """One size's result, measured by this script in a process of its own (the same
    arguments, only that size)."""
    argv = sys.argv[1:]
    kept: list[str] = []
    skip = False
    for arg in argv:  # drop --sizes and --out (the parent reports and writes)
        if skip:
            skip = False
        elif arg in ("--sizes", "--out"):
            skip = True
        elif not arg.startswith(("--sizes=", "--out=")):
            kept.append(arg)
    if not any(arg.startswith("--warm-gib") for arg in kept):
        kept += ["--warm-gib", str(WARM_GIB)]  # as much as the largest size's run warms
    done = subprocess.run(
        [sys.executable, __file__, *kept, "--sizes", text, "--one-process"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
