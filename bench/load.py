"""Bulk load: ``Table.load`` of 5M rows next to the old path (upsert, then a major
compaction to make them base files) and to plain columnar writes of the same rows.

The table is unpartitioned, keyed by an int64 ``id``, with bench/merge.py's four
value columns (int64, float64, a 16-character string, a timestamp), default
properties (``base.buckets`` 4, ``target-file-size`` 128 MiB). The rows come in a
random key order (a load sorts them; the plain writes do not have to). Contenders,
each on the same in-memory ``pyarrow.Table``, each into a fresh directory or table:

- load: ``Table.load(rows)`` (validate, hash to nodes, sort each node by key, write
  base files in parallel threads, register them in one catalog transaction);
- old path: ``Table.upsert(rows)`` then ``firn.compact(table, engine="local")``;
- floor: ``pyarrow.parquet.write_table`` of the rows as one file with the codec
  Firn's base files have by default (``file.compression``, LZ4), no sort;
- delta-rs: ``deltalake.write_deltalake`` of the rows (its defaults), when the
  ``deltalake`` package is installed (``pip install deltalake``); skipped, and said
  so, otherwise.

The load's result is checked (row count, and a sample of rows, against the input).
Goal (issue 14): the load within 1.5x of the plain columnar write. Each contender
runs ``--runs`` times, in interleaved rounds, and the best run counts (the old path
runs once: it is slow).

    .venv/bin/python bench/load.py                      # 5M rows
    .venv/bin/python bench/load.py --rows 500000 --runs 1
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from harness import (  # bench/ is on sys.path when run as a script
    ORDERS,
    bench_catalog,
    best_of,
    order_rows,
)

import firn
from firn.model.properties import TableProperties

CODEC = TableProperties().file_compression
FLOOR = f"floor (pyarrow write_table, {CODEC})"


def make_rows(n: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return order_rows(rng, rng.permutation(n))


def check(table: firn.Table, rows: pa.Table) -> None:
    read = table.read()
    assert read.num_rows == rows.num_rows, (read.num_rows, rows.num_rows)
    sample = rows.slice(0, 1000)
    got = read.join(sample.select(["id"]), keys="id", join_type="inner").sort_by("id")
    want = sample.sort_by("id").select(got.column_names)
    assert got.to_pylist() == want.to_pylist(), "loaded rows differ"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-old-path", action="store_true")
    args = parser.parse_args()

    rows = make_rows(args.rows)
    mib = rows.nbytes / 2**20
    print(f"{args.rows:,} rows, {mib:.0f} MiB in Arrow, random key order")
    scratch = Path(tempfile.mkdtemp(prefix="firn-bench-load-"))
    names = itertools.count()
    results: dict[str, float] = {}
    try:
        with bench_catalog() as catalog:

            def new_table() -> firn.Table:
                return catalog.create_table(f"load_{next(names)}", ORDERS, ["id"])

            def floor() -> None:
                pq.write_table(rows, scratch / f"plain-{next(names)}.parquet", compression=CODEC)

            loaded: list[firn.Table] = []

            def load() -> None:
                table = new_table()
                table.load(rows)
                loaded.append(table)

            contenders = {FLOOR: floor, "firn Table.load": load}
            try:
                from deltalake import write_deltalake

                def delta() -> None:
                    write_deltalake(str(scratch / f"delta-{next(names)}"), rows)

                contenders["delta-rs write_deltalake"] = delta
            except ImportError:
                print("delta-rs: the deltalake package is not installed; skipped")
            # Interleaved rounds, best of each: a busy machine slows every contender
            # of a round alike, not one of them.
            for _ in range(args.runs):
                for name, fn in contenders.items():
                    results[name] = min(results.get(name, float("inf")), best_of(1, fn))
            check(loaded[-1], rows)
            files = loaded[-1].files()
            print(
                f"load wrote {files.num_rows} base files, "
                f"{sum(files.column('size').to_pylist()) / 2**20:.0f} MiB"
            )
            if not args.skip_old_path:

                def old_path() -> None:
                    table = new_table()
                    table.upsert(rows)
                    firn.compact(table, engine="local")

                began = time.perf_counter()
                old_path()
                results["old path (upsert + local major compaction)"] = time.perf_counter() - began
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    width = max(len(k) for k in results)
    for name, seconds in results.items():
        print(f"{name:<{width}}  {seconds:7.2f} s  {args.rows / seconds / 1e6:6.2f} M rows/s")
    load_s = results["firn Table.load"]
    print(f"load / floor:     {load_s / results[FLOOR]:.2f}x")
    if "delta-rs write_deltalake" in results:
        print(f"load / delta-rs:  {load_s / results['delta-rs write_deltalake']:.2f}x")
    old = results.get("old path (upsert + local major compaction)")
    if old is not None:
        print(f"old path / load:  {old / load_s:.2f}x (how much faster the load is)")
    print("goal: load within 1.5x of the plain columnar write")


if __name__ == "__main__":
    main()
