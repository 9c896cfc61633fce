"""Key hash speed: FirnHash64 over 5M int64 keys and 2M short strings, one core.

Baselines measured in the same run: one pass of pyarrow compute over the same column
(the memory-traffic floor any vectorised hash pays), and a per-row Python loop of a
stable hash (blake2b, 8 bytes: what a non-vectorised stable implementation costs).
Goals from the issue: at least 5M int64 keys/s and 2M short strings/s.

    .venv/bin/python bench/keyhash.py
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from harness import best_of  # bench/ is on sys.path when run as a script

from firn.model.keyhash import hash_keys


def _stable(value: int | str) -> int:
    data = value.encode() if isinstance(value, str) else value.to_bytes(8, "little", signed=True)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def report(name: str, n: int, column: pa.Array, goal: float, floor: Callable[[], object]) -> None:
    ours = best_of(3, lambda: hash_keys([column]))
    floor_s = best_of(3, floor)
    sample = column.slice(0, 200_000).to_pylist()
    loop_s = best_of(1, lambda: [_stable(v) for v in sample]) * (n / len(sample))
    rate = n / ours
    print(
        f"{name:<14} {rate / 1e6:6.2f} M keys/s  (goal {goal / 1e6:.0f}M: "
        f"{'met' if rate >= goal else 'MISSED'})  "
        f"x{ours / floor_s:5.1f} the one-pass floor ({n / floor_s / 1e6:.0f}M/s), "
        f"x{loop_s / ours:5.1f} faster than a Python loop ({n / loop_s / 1e6:.2f}M/s)"
    )


def main() -> None:
    rng = np.random.default_rng(7)
    n_int, n_str = 5_000_000, 2_000_000
    ints = pa.array(rng.integers(-(2**62), 2**62, n_int, dtype=np.int64))
    strings = pa.array([f"user-{i:08d}" for i in rng.integers(0, 10**8, n_str)])
    print(f"FirnHash64, pyarrow {pa.__version__}, numpy {np.__version__}")
    report("int64", n_int, ints, 5e6, lambda: pc.sum(ints))
    report("short string", n_str, strings, 2e6, lambda: pc.sum(pc.binary_length(strings)))


if __name__ == "__main__":
    main()
