"""Merge-on-read speed: ``Table.read()`` over 100 change files x 10k rows, next to a
plain pyarrow read of the same files (the floor: no merge at all).

The table has an int64 key and three value columns; 100 commits of 10k upserts each
(keys drawn from 0..2M, so some keys are updated several times) with
``change.buckets = 1``, so every commit writes exactly one change file. The commit
rate of the same 100 commits is printed too.

    .venv/bin/python bench/read.py     # FIRN_DATABASE_URL, or a throwaway local Postgres
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from harness import bench_catalog, best_of  # bench/ is on sys.path when run as a script

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


def main() -> None:
    rng = np.random.default_rng(7)
    with bench_catalog() as catalog:
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
