"""The pyarrow read-merge-write floor of ``policy.py``: what one process does with the
bytes of a mean compaction task in a single call, with no catalog, no Spark and no
per-task overhead.

The inputs look like the run's mean task: the demo's schema, one partition (one
``day``), the mean task's bytes, one base file of unique order ids in key order
holding the tasks' share of base bytes (none when they read no base), and as many
change files of random order ids over the same range as the mean task read, each
row with a ``_seq`` (its commit's position) so "last row per key" is defined. The
floor reads
every file, sorts by the key (``day``, ``order_id``) then ``_seq``, keeps the last row
of each key, and writes one zstd Parquet file (dictionary encoding on the non-key
string columns only, as the engine's writer does), best of three.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

_STATUSES = np.array(["new", "paid", "shipped", "delivered", "returned"])
_DAY = "2024-06-01"


@dataclass(frozen=True)
class Floor:
    input_bytes: int
    input_files: int
    input_rows: int
    output_rows: int
    seconds: float
    """Best of the runs."""

    @property
    def bytes_per_s(self) -> float:
        return self.input_bytes / self.seconds

    def as_dict(self) -> dict[str, float | int]:
        return {
            "input_bytes": self.input_bytes,
            "input_files": self.input_files,
            "input_rows": self.input_rows,
            "output_rows": self.output_rows,
            "seconds": round(self.seconds, 4),
            "bytes_per_s": round(self.bytes_per_s),
        }


def _rows(order_ids: np.ndarray, seq: int, rng: np.random.Generator) -> pa.Table:
    """Rows like the demo's (workload.py): a customer of 1,000, an amount to the cent,
    one of five statuses; ``_seq`` the commit they came from."""
    n = len(order_ids)
    customers = np.char.add("c", np.char.zfill(rng.integers(0, 1000, n).astype(str), 3))
    return pa.table(
        {
            "order_id": pa.array(order_ids, pa.int64()),
            "day": pa.array(np.full(n, _DAY)),
            "customer": pa.array(customers),
            "amount": pa.array(np.round(rng.uniform(1.0, 500.0, n), 2)),
            "status": pa.array(_STATUSES[rng.integers(0, len(_STATUSES), n)]),
            "_seq": pa.array(np.full(n, seq, np.int64)),
        }
    )


def _bytes_per_row(rng: np.random.Generator, directory: Path) -> float:
    sample = _rows(np.arange(0, 400_000, 4, dtype=np.int64), 0, rng)
    path = directory / "sample.parquet"
    pq.write_table(sample, path, compression="zstd")
    return path.stat().st_size / sample.num_rows


def write_inputs(
    total_bytes: int, base_share: float, change_files: int, directory: Path, seed: int = 0
) -> list[Path]:
    """Files of about ``total_bytes`` in all, ``base_share`` of them in one base file
    (none when 0) and the rest in ``change_files`` change files (at least one). Small
    files compress worse than the sample, so the rows are scaled once more after a
    first try."""
    rng = np.random.default_rng(seed)
    per_row = _bytes_per_row(rng, directory)
    paths = _write(total_bytes, base_share, max(1, change_files), per_row, directory, rng)
    written = sum(p.stat().st_size for p in paths)
    return _write(
        total_bytes,
        base_share,
        max(1, change_files),
        per_row * written / total_bytes,
        directory,
        rng,
    )


def _write(
    total_bytes: int,
    base_share: float,
    change_files: int,
    per_row: float,
    directory: Path,
    rng: np.random.Generator,
) -> list[Path]:
    base_rows = int(total_bytes * base_share / per_row)
    change_rows = max(1, int(total_bytes * (1 - base_share) / per_row / change_files))
    # Order ids of one day (order_id % 4 == 0), the base holding half of those in range.
    span = max(base_rows, change_rows * change_files) * 8
    paths = []
    if base_rows:
        ids = np.sort(rng.choice(np.arange(0, span, 4, dtype=np.int64), base_rows, False))
        paths.append(directory / "base.parquet")
        pq.write_table(_rows(ids, 0, rng), paths[-1], compression="zstd")
    for seq in range(1, change_files + 1):
        ids = rng.integers(0, span // 4, change_rows, dtype=np.int64) * 4
        paths.append(directory / f"change-{seq}.parquet")
        pq.write_table(_rows(ids, seq, rng), paths[-1], compression="zstd")
    return paths


def merge(paths: list[Path], out: Path) -> int:
    """Read, sort by key then ``_seq``, keep each key's last row, write zstd; the
    rows written."""
    table = pa.concat_tables(read_whole(p) for p in paths)
    order = pc.sort_indices(
        table, [("day", "ascending"), ("order_id", "ascending"), ("_seq", "ascending")]
    )
    table = table.take(order)
    ids = table.column("order_id").to_numpy()
    # Within one day the order id alone tells keys apart.
    last = np.append(ids[1:] != ids[:-1], True)
    kept = table.filter(pa.array(last)).drop_columns(["_seq"])
    pq.write_table(
        kept,
        out,
        compression="zstd",
        use_dictionary=["customer", "status"],
        column_encoding={"order_id": "DELTA_BINARY_PACKED"},  # as the engine's writer
    )
    return kept.num_rows


def read_whole(path: Path) -> pa.Table:
    """One file, the fastest way pyarrow has for its size: a small file decodes
    sooner on this thread than through ``read_table``'s dataset scan and thread pool
    (0.41 against 0.8-1.1 ms for a 250-row file), a large one on the pool."""
    return pq.ParquetFile(path).read(use_threads=path.stat().st_size > (1 << 20))


def measure_floor(
    total_bytes: int, base_share: float, change_files: int, under: Path, runs: int = 3
) -> Floor:
    """The floor on inputs as ``write_inputs`` makes them, in a throwaway directory
    under ``under``."""
    under.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-policy-floor-", dir=under) as tmp:
        directory = Path(tmp)
        paths = write_inputs(total_bytes, base_share, change_files, directory)
        input_bytes = sum(p.stat().st_size for p in paths)
        input_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
        best, output_rows = float("inf"), 0
        for _ in range(runs):
            began = time.perf_counter()
            output_rows = merge(paths, directory / "out.parquet")
            best = min(best, time.perf_counter() - began)
        return Floor(input_bytes, len(paths), input_rows, output_rows, best)
