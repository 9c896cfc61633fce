"""The Spark writer's executor side (``firn.spark.tasks``) runs from the shipped zip
with pydantic, psycopg and Kafka blocked, as on a cluster's workers: it writes a
change set's files and a load's base files and imports nothing of the catalog or API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from firn.engine.shipping import firn_zip
from tests.unit.test_executor_imports import BLOCKED

CHILD = """
import json, pickle, sys

BLOCKED = set(json.loads(sys.argv[2]))


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed on a Spark worker")
        return None


sys.meta_path.insert(0, Blocker())
sys.path.insert(0, sys.argv[1])

import pyarrow as pa

import firn
from firn.model.schema import TableSchema
from firn.spark.tasks import WriteJob, write_task

table = TableSchema.build(
    "t",
    pa.schema([pa.field("p", pa.string(), False), pa.field("id", pa.int64(), False),
               pa.field("v", pa.string())]),
    ["p", "id"],
    ["p"],
)
rows = pa.table({"p": ["a", "a", "b"], "id": [3, 1, 2], "v": ["c", "a", "b"],
                 "_op": ["U", "D", "U"]})
out = {}
for overwrite in (False, True):
    job = WriteJob("t", 1, sys.argv[3], table, 2, 2, 1 << 20, f"job-{overwrite}/", overwrite,
                   None, None)
    job = pickle.loads(pickle.dumps(job))  # as Spark ships it
    batch = rows.drop_columns(["_op"]) if overwrite else rows
    message = write_task(job, batch.to_batches())
    out[str(overwrite)] = sorted((f.file_type, f.partition_key, f.record_count)
                                 for f in message.files)
out["firn_file"] = firn.__file__
out["modules"] = sorted(m for m in sys.modules if m == "firn" or m.startswith("firn."))
print(json.dumps(out))
"""


def test_spark_tasks_write_from_the_zip_without_pydantic_psycopg_or_kafka(
    tmp_path: Path,
) -> None:
    zip_path = firn_zip()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(zip_path), json.dumps(BLOCKED), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["firn_file"].startswith(str(zip_path)), "firn came from the zip"
    layers = {m.split(".")[1] for m in report["modules"] if m.count(".")}
    assert layers <= {"engine", "io", "model", "errors", "spark"}, report["modules"]
    assert "firn.spark.jobs" not in report["modules"], "the driver side stays on the driver"
    assert report["False"] == [["D", "p=a", 1], ["I", "p=a", 1], ["I", "p=b", 1]]
    assert {t for t, _, _ in report["True"]} == {"B"}
    assert {p for _, p, _ in report["True"]} == {"p=a", "p=b"}
    assert sum(n for _, _, n in report["True"]) == 3
