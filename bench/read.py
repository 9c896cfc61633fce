"""Merge-on-read speed, scan throughput and point lookups, each next to a plain
pyarrow read of the same Parquet files measured in the same run (the floor: no merge,
no catalog).

1. ``Table.read()`` over 100 change files x 10k rows. The table has an int64 key and
   three value columns; 100 commits of 10k upserts each (keys drawn from 0..2M, so
   some keys are updated several times) with ``change.buckets = 1``, so every commit
   writes exactly one change file. The commit rate of the same 100 commits is
   printed too.
2. ``Table.scan()`` of a 2M-row table in 4 partitions (``region``), default buckets
   (4 nodes): first loaded and compacted, then 20 commits of 10k upserts left
   unmerged. ``to_arrow()`` and the streaming ``to_batches()``, with unmerged
   changes and after a major compaction, in rows/s against pyarrow reading the same
   files.
3. A point lookup by whole key on the table with unmerged changes: files opened and
   time, pruned (``scan(filter="region = 'r1' and id = ...")``) against unpruned
   (the whole table read, then filtered).

    .venv/bin/python bench/read.py     # FIRN_DATABASE_URL, or a throwaway local Postgres
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from harness import bench_catalog, best_of  # bench/ is on sys.path when run as a script

import firn

FILES = 100
ROWS = 10_000
KEYS = 2_000_000

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("label", pa.string()),
        pa.field("price", pa.float64()),
    ]
)


def change_set(rng: np.random.Generator) -> pa.Table:
    ids = rng.integers(0, KEYS, ROWS)
    return pa.table(
        {
            "id": ids,
            "qty": rng.integers(0, 1000, ROWS),
            "label": pa.array([f"label-{i % 997:05d}" for i in ids]),
            "price": rng.random(ROWS),
            "_op": pa.array(["U"] * ROWS),
        }
    )


SCAN_ROWS = 2_000_000
SCAN_COMMITS = 20
REGIONS = ["r0", "r1", "r2", "r3"]

SCAN_SCHEMA = pa.schema(
    [pa.field("region", pa.string(), nullable=False), *(SCHEMA.field(n) for n in SCHEMA.names)]
)


def regional(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "region": pa.array(np.array(REGIONS)[ids % len(REGIONS)]),
            "id": ids,
            "qty": rng.integers(0, 1000, n),
            "label": pa.array([f"label-{i % 997:05d}" for i in ids]),
            "price": rng.random(n),
            "_op": pa.array(["U"] * n),
        }
    )


def main() -> None:
    rng = np.random.default_rng(7)
    with bench_catalog() as catalog:
        merge_on_read(catalog, rng)
        scans(catalog, rng)


def rate(rows: int, seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms  {rows / seconds / 1e6:6.2f} M rows/s"


def plain_reader(table: firn.Table) -> Callable[[], pa.Table]:
    """pyarrow reading the table's live files as plain Parquet (the floor)."""
    paths = [table.storage.full_path(p) for p in table.files().column("path").to_pylist()]
    return lambda: ds.dataset(paths, format="parquet", filesystem=table.storage.fs).to_table()


def scans(catalog: firn.Catalog, rng: np.random.Generator) -> None:
    table = catalog.create_table("bench_scan", SCAN_SCHEMA, ["region", "id"], ["region"])
    began = time.perf_counter()
    table.commit(regional(rng, np.arange(SCAN_ROWS)))
    firn.compact(table, engine="local")
    for _ in range(SCAN_COMMITS):
        table.commit(regional(rng, rng.integers(0, SCAN_ROWS, ROWS)))
    setup_s = time.perf_counter() - began
    print(
        f"\nscan: {SCAN_ROWS:,} rows in {len(REGIONS)} partitions, then {SCAN_COMMITS} "
        f"commits x {ROWS:,} rows unmerged (set up in {setup_s:.1f} s)"
    )

    def streamed() -> int:
        return sum(b.num_rows for b in table.scan().to_batches())

    for state in ("unmerged changes", "compacted"):
        if state == "compacted":
            firn.compact(table, engine="local")
        plain = plain_reader(table)
        files = table.files()
        rows_out = table.scan().to_arrow().num_rows
        plain_s = best_of(3, plain)
        arrow_s = best_of(3, lambda: table.scan().to_arrow())
        batches_s = best_of(3, streamed)
        print(
            f"  {state}: {files.num_rows} files, {pc.sum(files['records']).as_py():,} "
            f"rows stored, {rows_out:,} rows out"
        )
        print(f"    plain pyarrow read   {rate(rows_out, plain_s)}")
        print(f"    scan().to_arrow()    {rate(rows_out, arrow_s)}   {arrow_s / plain_s:.2f}x")
        print(f"    scan().to_batches()  {rate(rows_out, batches_s)}   {batches_s / plain_s:.2f}x")
        if state == "unmerged changes":
            lookups(table, rng)


def lookups(table: firn.Table, rng: np.random.Generator) -> None:
    ids = [int(i) for i in rng.integers(0, SCAN_ROWS, 20)]
    filters = [f"region = '{REGIONS[i % len(REGIONS)]}' and id = {i}" for i in ids]
    pruned = table.scan(filter=filters[0]).explain()
    everything = table.scan().explain()
    began = time.perf_counter()
    for text in filters:
        table.scan(filter=text).to_arrow()
    pruned_s = (time.perf_counter() - began) / len(filters)

    def unpruned() -> None:
        i = ids[0]
        whole = table.scan().to_arrow()
        whole.filter((pc.field("region") == REGIONS[i % len(REGIONS)]) & (pc.field("id") == i))

    unpruned_s = best_of(2, unpruned)
    print(f"  point lookup (mean of {len(filters)} keys):")
    print(
        f"    pruned     {pruned.files_kept:4d} of {pruned.files} files opened, "
        f"{pruned.bytes_kept:,} bytes, {pruned_s * 1000:8.1f} ms"
    )
    print(
        f"    unpruned   {everything.files_kept:4d} of {everything.files} files opened, "
        f"{everything.bytes_kept:,} bytes, {unpruned_s * 1000:8.1f} ms   "
        f"{unpruned_s / pruned_s:.0f}x slower"
    )


def merge_on_read(catalog: firn.Catalog, rng: np.random.Generator) -> None:
    table = catalog.create_table("bench_read", SCHEMA, ["id"], properties={"change.buckets": 1})
    batches = [change_set(rng) for _ in range(FILES)]
    began = time.perf_counter()
    for batch in batches:
        table.commit(batch)
    commit_s = time.perf_counter() - began
    files = table.files()
    paths = [table.storage.full_path(p) for p in files.column("path").to_pylist()]
    assert len(paths) == FILES

    def plain() -> pa.Table:
        return ds.dataset(paths, format="parquet", filesystem=table.storage.fs).to_table()

    rows_in = plain().num_rows
    merged = table.read()
    plain_s = best_of(5, plain)
    read_s = best_of(5, table.read)
    print(f"{FILES} change files x {ROWS} rows = {rows_in:,} rows in, {merged.num_rows:,} out")
    print(f"commit: {FILES / commit_s:.1f} commits/s, {rows_in / commit_s / 1e6:.2f} M rows/s")
    for name, seconds in (("plain pyarrow read", plain_s), ("Table.read()", read_s)):
        print(f"{name:<20} {seconds * 1000:8.1f} ms  {rows_in / seconds / 1e6:6.1f} M rows/s")
    print(f"read() / plain read: {read_s / plain_s:.2f}x")


if __name__ == "__main__":
    main()
