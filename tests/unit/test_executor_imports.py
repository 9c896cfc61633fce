"""What runs in Spark's Python workers imports only what a cluster's workers have.

A cluster's workers have pyspark, pyarrow and numpy, and Firn's code arrives as the zip
``firn.engine.shipping`` builds (``zipimport`` loads pure Python only). Here a child
interpreter imports the executor entry points from that zip with pydantic, psycopg,
confluent_kafka and faust blocked, and runs a real merge task: an import that sneaks
one of them into the executor path fails this test, not a cluster in production.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from firn.engine.shipping import EXECUTOR_MODULES, PACKAGE_DIR, firn_zip
from firn.model.files import DeletionVector
from firn.model.tasks import InputFile, Kind, TaskResult, TaskSpec

BLOCKED = (
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "psycopg",
    "psycopg_binary",
    "psycopg_pool",
    "confluent_kafka",
    "faust",
    "jsonschema",
)

CHILD = """
import json, sys

BLOCKED = set(json.loads(sys.argv[2]))


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed on a Spark worker")
        return None


sys.meta_path.insert(0, Blocker())
sys.path.insert(0, sys.argv[1])
for module in json.loads(sys.argv[3]):
    __import__(module)

import pyarrow as pa
import pyarrow.parquet as pq

import firn
from firn.engine.execution import _run_serialized
from firn.engine.kernel import KernelLimits
from firn.model.schema import TableSchema

table = TableSchema.build(
    "t", pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.string())]), ["id"]
)
location = sys.argv[4]
rows = pa.table(
    {"id": [3, 1, 2, 1], "v": ["c", "a", "b", "a2"], "_ord": [0, 1, 2, 3]},
    schema=pa.schema([*table.schema, pa.field("_ord", pa.int64(), False)]),
)
pq.write_table(rows, location + "/change/c1.parquet")
spec = json.loads(sys.argv[5])
spec["change_files"][0]["size_bytes"] = len(open(location + "/change/c1.parquet", "rb").read())
result = json.loads(_run_serialized(table, KernelLimits(), (json.dumps(spec), 1)))
print(json.dumps({
    "firn_file": firn.__file__,
    "modules": sorted(m for m in sys.modules if m == "firn" or m.startswith("firn.")),
    "result": result,
}))
"""


def test_the_executor_path_runs_from_the_zip_without_pydantic_psycopg_or_kafka(
    tmp_path: Path,
) -> None:
    zip_path = firn_zip()
    (tmp_path / "change").mkdir()
    spec = TaskSpec(
        plan_id=1,
        task_id=7,
        table_id=1,
        location=str(tmp_path),
        partition_key="",
        kind="major",
        node_m=1,
        node_i=0,
        lower=None,
        upper=None,
        base_files=(),
        change_files=(
            InputFile(
                file_id=1,
                path="change/c1.parquet",
                file_type="I",
                node_m=1,
                node_i=0,
                seq=1,
                size_bytes=0,  # the child fills in the size of the file it writes
                record_count=4,
            ),
        ),
        from_merged_seq=0,
        to_seq=1,
        target_file_size=1 << 20,
        output_prefix="base/p1-t7",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(zip_path),
            json.dumps(BLOCKED),
            json.dumps(EXECUTOR_MODULES),
            str(tmp_path),
            spec.to_json(),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository: nothing found by accident
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["firn_file"].startswith(str(zip_path)), "firn came from the zip"
    layers = {m.split(".")[1] for m in report["modules"] if m.count(".")}
    assert layers <= {"engine", "io", "model", "errors"}, report["modules"]
    result = TaskResult.from_dict(report["result"])
    assert result.error is None
    assert (result.rows_read, result.rows_written) == (4, 3)
    assert [(o.record_count, o.min_key, o.max_key) for o in result.outputs] == [(3, [1], [3])]


def test_the_zip_holds_the_package_sources_and_is_built_once() -> None:
    zip_path = firn_zip()
    assert firn_zip() is zip_path
    with zipfile.ZipFile(zip_path) as z:
        names = set(z.namelist())
    sources = {
        "firn/" + p.relative_to(PACKAGE_DIR).as_posix()
        for p in PACKAGE_DIR.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sources <= names
    assert not any(n.endswith(".pyc") for n in names)


def test_task_specs_and_results_round_trip_through_json() -> None:
    spec = TaskSpec(
        plan_id=1,
        task_id=2,
        table_id=3,
        location="s3://bucket/t",
        partition_key="day=1",
        kind="minor",
        node_m=1,
        node_i=1,
        lower=[5, "a"],
        upper=None,
        base_files=(),
        change_files=(
            InputFile(
                file_id=9,
                path="change/x.parquet",
                file_type="D",
                node_m=1,
                node_i=0,
                seq=4,
                size_bytes=10,
                record_count=2,
                min_key=[1, "a"],
                max_key=[9, "z"],
            ),
        ),
        cut_before=([7, "q"],),
        from_merged_seq=2,
        to_seq=4,
        target_file_size=100,
        output_prefix="change/day=1/p1-t2",
        compression="zstd",
    )
    assert TaskSpec.from_json(spec.to_json()) == spec
    result = TaskResult(task_id=2, attempt=1, error="boom", retryable=False)
    assert TaskResult.from_json(result.to_json()) == result


def test_a_task_spec_of_another_shape_is_refused() -> None:
    good = json.loads(
        TaskSpec(
            plan_id=1,
            task_id=2,
            table_id=3,
            location="/t",
            partition_key="",
            kind="major",
            node_m=1,
            node_i=0,
            lower=None,
            upper=None,
            base_files=(),
            change_files=(),
            from_merged_seq=0,
            to_seq=1,
            target_file_size=100,
            output_prefix="base/p1-t2",
        ).to_json()
    )
    for broken, message in [
        ({**good, "extra": 1}, "has no field"),
        ({k: v for k, v in good.items() if k != "to_seq"}, "missing field"),
        ({**good, "kind": "huge"}, "kind must be one of"),
        ({**good, "compression": "gzip"}, "compression must be one of"),
    ]:
        with pytest.raises(ValueError, match=message):
            TaskSpec.from_dict(broken)


def test_a_task_spec_converts_as_asdict_would() -> None:
    """``to_dict`` skips ``asdict``'s deep copy, not anything it converts: nested
    vectors become dicts, optional fields left out as before, keys in field order."""
    vector = DeletionVector(path="base/p1-t2-a1/dv-9.parquet", size_bytes=40, rows=3)
    base = InputFile(
        file_id=9,
        path="base/b.parquet",
        file_type="B",
        node_m=1,
        node_i=0,
        seq=1,
        size_bytes=10,
        record_count=5,
        min_key=[1],
        max_key=[9],
        deletion_vector=vector,
        schema_id=2,
    )
    change = dataclasses.replace(base, file_id=10, file_type="I", deletion_vector=None, schema_id=0)
    spec = TaskSpec(
        plan_id=1,
        task_id=2,
        table_id=3,
        location="/t",
        partition_key="",
        kind=Kind.MAJOR,
        node_m=1,
        node_i=0,
        lower=[1],
        upper=[10],
        base_files=(base,),
        change_files=(change,),
        cut_before=([5],),
        from_merged_seq=0,
        to_seq=1,
        target_file_size=100,
        output_prefix="base/p1-t2",
        rewrite=(9,),
        table={"name": "t", "columns": [{"name": "id", "type": "int64"}]},
    )
    expected = dataclasses.asdict(spec)
    expected["base_files"] = [dataclasses.asdict(base)]
    change_form = dataclasses.asdict(change)
    del change_form["deletion_vector"], change_form["schema_id"]
    expected["change_files"] = [change_form]
    out = spec.to_dict()
    assert out == expected
    assert list(out) == list(expected)
    assert TaskSpec.from_json(spec.to_json()) == spec
