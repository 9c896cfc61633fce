"""Trivial moves (issue 15, item 2) on a real catalog: a change file whose key range
overlaps nothing in its fold becomes a base file by metadata alone (same path, no
bytes written); one whose keys repeat is merged instead; one that overlaps the base
is folded as before. Reads at every snapshot stay those of the model, retention
keeps a moved file while a kept row names it, and a result cannot claim a move of
another file."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa

import firn
from firn.catalog.claiming import claim_task, release_tasks
from firn.catalog.expiry import expire
from firn.catalog.progress import written_bytes
from firn.catalog.results import record_result
from firn.engine.planning import plan_now
from firn.model.plans import PlanRecord
from firn.model.tasks import TaskResult, moved_output
from tests.integration.table_checks import check_base_files

SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string(), nullable=False)]
)
# 2 KiB target, so small-file-bytes is 256 B: every Parquet file is large enough to move.
# Deletion vectors off: a late update here rewrites the base file it touches (with
# vectors the file would be kept: tests/integration/test_deletion_vectors.py).
PROPERTIES = {
    "base.buckets": 1,
    "change.buckets": 1,
    "target-file-size": "2KiB",
    "deletion-vectors.max-ratio": 0,
}


def _rows(keys: range | list[int], tag: str) -> pa.Table:
    return pa.table({"k": list(keys), "v": [f"{tag}{k}" for k in keys]}, schema=SCHEMA)


def _files(table: firn.Table, store: str) -> dict[str, Any]:
    return {r["path"]: r for r in table.files().to_pylist() if r["store"] == store}


def _view(table: firn.Table, snapshot: int | None = None) -> dict[int, str]:
    rows = table.read(snapshot=snapshot).to_pylist()
    return {r["k"]: r["v"] for r in rows}


def _compact(table: firn.Table) -> dict[str, Any]:
    summary = firn.compact(table, kind="major", engine="local")
    assert summary["failed_attempts"] == 0, summary["errors"]
    assert all(p["outcome"] == "committed" for p in summary["plans"]), summary
    return summary


def test_disjoint_files_move_into_base_and_overlapping_or_repeating_ones_merge(
    shared_catalog: firn.Catalog,
) -> None:
    catalog = shared_catalog
    table = catalog.create_table("events", SCHEMA, ["k"], [], PROPERTIES)
    model: dict[int, str] = {}
    snapshots: list[tuple[int, dict[int, str]]] = []

    def commit(rows: pa.Table) -> None:
        table.upsert(rows)
        model.update(zip(rows.column("k").to_pylist(), rows.column("v").to_pylist(), strict=True))

    def compact_and_check() -> None:
        _compact(table)
        check_base_files(table)
        assert _view(table) == model
        snapshots.append((table.current_snapshot(), dict(model)))

    # An event log: each commit's keys come after every earlier one.
    commit(_rows(range(0, 100), "a"))
    first = set(_files(table, "change"))
    committed_before = written_bytes(catalog.conn, table.table_id).compacted
    compact_and_check()
    assert set(_files(table, "base")) == first, "the commit's file is now the base, as it was"
    commit(_rows(range(100, 200), "b"))
    second = set(_files(table, "change"))
    compact_and_check()
    assert set(_files(table, "base")) == first | second
    assert written_bytes(catalog.conn, table.table_id).compacted == committed_before == 0

    # Keys repeated in one file (two upserts of 250 in one commit): merged, not moved.
    commit(pa.table({"k": [200, 250, 250, 299], "v": ["c200", "c250-old", "c250", "c299"]}))
    repeated = set(_files(table, "change"))
    compact_and_check()
    last_plan = catalog.conn.execute(
        "SELECT bool_and((spec->>'move')::boolean) FROM compaction_task WHERE plan_id = "
        "(SELECT max(plan_id) FROM compaction_plan WHERE table_id = %s)",
        (table.table_id,),
    ).fetchone()
    assert last_plan == (True,), "planned as a move: the kernel found the repeated key"
    base = set(_files(table, "base"))
    assert not repeated & base, "a file with a repeated key is merged, not moved"
    assert first | second <= base

    # A late update of key 50 overlaps the first base file: that one is rewritten.
    commit(_rows([50], "late"))
    compact_and_check()
    base = set(_files(table, "base"))
    assert first.isdisjoint(base)
    assert second <= base

    for snapshot, view in snapshots:
        assert _view(table, snapshot) == view


def test_retention_keeps_a_moved_file_until_no_kept_row_names_it(
    shared_catalog: firn.Catalog,
) -> None:
    catalog = shared_catalog
    table = catalog.create_table(
        "moved_retention", SCHEMA, ["k"], [], {**PROPERTIES, "snapshot.retention": 0}
    )
    table.upsert(_rows(range(0, 50), "a"))
    (moved,) = _files(table, "change")
    _compact(table)
    assert set(_files(table, "base")) == {moved}
    # The change row is removed by a snapshot past retention; the base row is live.
    table.upsert(_rows(range(60, 70), "b"))
    (report,) = expire(catalog.conn, table.name, list_storage=False).tables
    assert moved not in report.files
    assert table.storage.exists(moved)
    assert _view(table) == {
        **{k: f"a{k}" for k in range(50)},
        **{k: f"b{k}" for k in range(60, 70)},
    }
    rows = catalog.conn.execute(
        "SELECT count(*) FROM data_file WHERE path = %s", (moved,)
    ).fetchone()
    assert rows == (2,), "the change row stays while the base row under its path is kept"

    # Once the moved base file is rewritten too, both rows and the file go.
    table.upsert(_rows([10], "late"))
    _compact(table)
    assert moved not in _files(table, "base")
    (report,) = expire(catalog.conn, table.name, list_storage=False).tables
    assert report.files.count(moved) == 1
    assert not table.storage.exists(moved)
    assert catalog.conn.execute(
        "SELECT count(*) FROM data_file WHERE path = %s", (moved,)
    ).fetchone() == (0,)
    assert _view(table)[10] == "late10"


def test_a_result_cannot_claim_a_move_the_task_does_not_own(shared_catalog: firn.Catalog) -> None:
    """A move task's result may name its own change file as a base file, exactly as
    the spec describes it; naming another live file, or its own with other stats, fails
    the attempt and registers nothing."""
    catalog = shared_catalog
    table = catalog.create_table("moved_forged", SCHEMA, ["k"], [], PROPERTIES)
    table.upsert(_rows(range(0, 20), "a"))
    other = catalog.create_table("moved_other", SCHEMA, ["k"], [], PROPERTIES)
    other.upsert(_rows(range(0, 20), "x"))
    record = plan_now(catalog.conn, table, "", "major")
    assert isinstance(record, PlanRecord)
    (task,) = record.tasks
    assert task.move
    release_tasks(catalog.conn, record)
    conn = catalog.conn
    spec, attempt = claim_task(conn, task.task_id, "test", 60) or (None, 0)
    assert spec is not None
    honest = moved_output(spec.change_files[0], spec)
    (foreign,) = _files(other, "change")
    for forged in [replace(honest, path=foreign), replace(honest, record_count=1_000_000)]:
        result = TaskResult(task_id=spec.task_id, attempt=attempt, outputs=(forged,))
        assert record_result(conn, result, max_attempts=9) == "retry"
        conn.execute(
            "UPDATE compaction_task SET not_before = NULL WHERE task_id = %s", (spec.task_id,)
        )
        spec, attempt = claim_task(conn, spec.task_id, "test", 60) or (None, 0)
        assert spec is not None
    assert set(_files(table, "base")) == set()
    result = TaskResult(task_id=spec.task_id, attempt=attempt, outputs=(honest,))
    assert record_result(conn, result, max_attempts=9) == "prepared"
