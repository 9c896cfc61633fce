"""The Spark guide's first example (docs/guide/spark.md) runs as written, as a user
runs it: a fresh Python process (so a fresh Spark JVM, whose Python workers inherit
the FIRN_ variables set before it started) writing to a real catalog."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import firn
from firn.settings import FirnSettings

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "spark.md"


def test_the_spark_guide_example_runs(
    settings: FirnSettings, tmp_path: Path, as_a_user: Path
) -> None:
    match = re.search(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert match is not None, "the Spark guide lost its example"
    env = {
        **os.environ,  # the stack's FIRN_ variables (as_a_user)
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    schema = pa.schema(
        [
            pa.field("region", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("amount", pa.float64()),
        ]
    )
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        orders = catalog.create_table("orders", schema, ["region", "id"], ["region"])
        orders.upsert(pa.table({"region": ["eu", "eu"], "id": [1, 2], "amount": [9.5, 3.0]}))
        done = subprocess.run(
            [sys.executable, "-c", match[1]],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        rows = sorted((r["region"], r["id"], r["amount"]) for r in orders.read().to_pylist())
        assert rows == [
            ("eu", 1, 9.5),
            ("eu", 7, 1.5),
            ("eu", 8, 2.5),
            *(("us", n, float(n)) for n in range(100)),
        ]
        assert orders.current_snapshot() == 3, "upsert, one change set, one load"
