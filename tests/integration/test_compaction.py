"""What a compaction leaves behind (issue 4 acceptance), on the real catalog and Spark:
sorted, sized, non-overlapping base files; untouched files kept; splits by key range;
re-bucketing; bin-packing; idempotent and validated plan commits; state history."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import firn
from firn.catalog.claiming import (
    claim_task,
    claim_tasks,
    release_tasks,
    stale_waiting_tasks,
    waiting_tasks,
)
from firn.catalog.compactions import commit_plan, compaction_event, plan_summaries
from firn.catalog.files import current_snapshot, files_at, partitions_of
from firn.catalog.leasing import expire_leases, extend_lease
from firn.catalog.metrics import partition_states
from firn.catalog.plans import fail_plan
from firn.catalog.results import record_result, record_results
from firn.engine import compaction
from firn.engine.execution import run_local
from firn.engine.kernel import KernelLimits
from firn.engine.planning import draft_now, plan_now, store_draft
from firn.model.plans import PlanRecord, PlanSkipped
from firn.model.states import Actor, TaskState
from firn.model.tasks import Kind, TaskResult
from firn.model.triggers import decide
from firn.model.values import key_from_json
from firn.postgres.connection import Connection
from firn.settings import FirnSettings
from tests.hash_tree import HASH_TREE

SCHEMA = pa.schema(
    [
        pa.field("day", pa.int32(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)
_names = itertools.count()


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


class Model:
    """The expected merged view: key -> row."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], tuple[Any, ...]] = {}

    def upsert(self, table: firn.Table, days: Any, ids: Any, tag: str) -> None:
        names = [f"{tag}-{i}" for i in ids]
        amounts = [float(i) / 7 for i in ids]
        table.upsert(
            pa.table({"day": days, "id": ids, "name": names, "amount": amounts}, schema=SCHEMA)
        )
        for row in zip(days, ids, names, amounts, strict=True):
            self.rows[(int(row[0]), int(row[1]))] = (int(row[0]), int(row[1]), row[2], row[3])

    def delete(self, table: firn.Table, days: Any, ids: Any) -> None:
        table.delete(pa.table({"day": pa.array(days, pa.int32()), "id": pa.array(ids, pa.int64())}))
        for key in zip(days, ids, strict=True):
            self.rows.pop((int(key[0]), int(key[1])), None)

    def check(self, table: firn.Table) -> None:
        got = table.read()
        rows = list(zip(*(got.column(c).to_pylist() for c in SCHEMA.names), strict=True))
        assert len(rows) == len(self.rows), "row count differs from the model"
        assert {(r[0], r[1]): r for r in rows} == self.rows


def live_entries(table: firn.Table) -> list[Any]:
    return files_at(table.catalog.conn, table.table_id, table.current_snapshot())


def test_major_compaction_leaves_sorted_sized_base_files_and_keeps_untouched_ones(
    catalog: firn.Catalog,
) -> None:
    target = 24 * 1024
    table = catalog.create_table(
        f"sized_{next(_names)}",
        SCHEMA,
        ["day", "id"],
        ["day"],
        {"change.buckets": 4, "base.buckets": 2, "target-file-size": target, **HASH_TREE},
    )
    model = Model()
    ids = np.arange(30_000)
    for day in (1, 2):
        model.upsert(table, [day] * len(ids), ids, "v1")
    model.delete(table, [1] * 500, ids[::60])
    summary = firn.compact(table)
    assert [p["outcome"] for p in summary["plans"]] == ["committed", "committed"]
    model.check(table)

    entries = live_entries(table)
    assert all(e.store == "base" for e in entries), "unmerged change files remain"
    key_schema = table.definition.key_schema

    def in_key_order(e: Any) -> tuple[Any, ...]:
        return (e.partition_key, e.node, key_from_json(e.min_key, key_schema))

    for (part, node), files in itertools.groupby(
        sorted(entries, key=in_key_order), key=lambda e: (e.partition_key, e.node)
    ):
        files = list(files)
        assert node.m == 2
        for e in files:
            keys = table.storage.read_parquet(e.path).select(["day", "id"])
            order = pc.sort_indices(keys, sort_keys=[("day", "ascending"), ("id", "ascending")])
            assert order.to_pylist() == list(range(keys.num_rows)), f"{e.path} is not sorted"
            assert e.record_count == keys.num_rows
        for a, b in itertools.pairwise(files):
            assert key_from_json(a.max_key, key_schema) < key_from_json(b.min_key, key_schema)
        # Every file of a node but its last is at most the target size.
        assert all(e.size_bytes <= target for e in files[:-1]), [e.size_bytes for e in files]
        assert len(files) > 2, f"{part} {node}: expected the node's rows cut into several files"

    # Change a narrow key range of day 2 only: every other base file stays as it is.
    before = {e.path for e in live_entries(table)}
    model.upsert(table, [2] * 50, ids[1000:1050], "v2")
    summary = firn.compact(table)
    assert [p["partition"] for p in summary["plans"]] == ["day=2"]
    model.check(table)
    after = live_entries(table)
    assert all(e.store == "base" for e in after)
    kept = before & {e.path for e in after}
    rewritten = before - kept
    assert {e.partition_key for e in after if e.path in kept} == {"day=1", "day=2"}
    # Those files are kept with a deletion vector for the 50 rows (deletion-vectors.max-ratio).
    vectored = {e.path for e in after if e.path in kept and e.deletion_vector is not None}
    assert not rewritten
    assert 1 <= len(vectored) <= 2, "only the files holding the changed keys are touched"
    assert sum(e.deletion_vector.rows for e in after if e.deletion_vector) == 50
    assert sum(e.partition_key == "day=1" for e in after) == sum(
        1 for p in before if "/day=1/" in f"/{p}"
    )


def test_small_base_files_left_by_folds_are_rewritten_when_the_rule_fires(
    catalog: firn.Catalog,
) -> None:
    """Keys in order fold without rewriting older base, so each fold adds a small base
    file; once they pass ``major.file-count`` the services' kind (``auto``) rewrites
    them into one, with nothing left unmerged, and the table reads the same."""
    properties = {"base.buckets": 1, "major.file-count": 4}
    table = catalog.create_table("appended", SCHEMA, ["day", "id"], ["day"], properties)
    model = Model()
    for n in range(5):
        ids = list(range(10 * n, 10 * n + 10))
        model.upsert(table, [1] * 10, ids, f"fold{n}")
        assert firn.compact(table, engine="local")["plans"][-1]["outcome"] == "committed"
    assert len(live_entries(table)) == 5, "one base file a fold"
    summary = firn.compact(table, kind="auto", engine="local")
    assert [p["outcome"] for p in summary["plans"]] == ["committed"], summary
    (only,) = live_entries(table)
    assert only.store == "base"
    assert only.record_count == 50
    model.check(table)
    assert firn.compact(table, kind="auto", engine="local")["plans"] == [], "nothing due"


def test_a_big_node_splits_into_key_range_tasks(catalog: firn.Catalog) -> None:
    table = catalog.create_table(
        f"split_{next(_names)}",
        SCHEMA,
        ["day", "id"],
        [],
        {
            "change.buckets": 2,
            "base.buckets": 1,
            "target-file-size": "16KiB",
            "task.max-bytes": "48KiB",
        },
    )
    model = Model()
    ids = np.arange(20_000)
    model.upsert(table, [1] * len(ids), ids, "v1")
    firn.compact(table)
    assert len(live_entries(table)) > 4
    # Updates all over the key space, including the first and last keys and keys
    # right at file boundaries.
    key_schema = table.definition.key_schema
    boundaries = [key_from_json(e.min_key, key_schema)[1] for e in live_entries(table)]
    touched = sorted({0, 19_999, *boundaries, *(b - 1 for b in boundaries if b), *ids[::97]})
    model.upsert(table, [1] * len(touched), touched, "v2")
    doomed = touched[::10]
    model.delete(table, [1] * len(doomed), doomed)
    summary = firn.compact(table)
    assert summary["plans"][0]["tasks"] > 1, summary
    specs = _task_specs(catalog, summary["plans"][0]["plan_id"])
    assert specs[0]["lower"] is None
    assert specs[-1]["upper"] is None
    for a, b in itertools.pairwise(specs):
        assert a["upper"] == b["lower"] is not None
    model.check(table)


def _task_specs(catalog: firn.Catalog, plan_id: int) -> list[dict[str, Any]]:
    rows = catalog.conn.execute(
        "SELECT spec FROM compaction_task WHERE plan_id = %s ORDER BY ordinal", (plan_id,)
    ).fetchall()
    return [r[0] for r in rows]


def test_full_compaction_rebuckets_every_base_file(catalog: firn.Catalog) -> None:
    table = catalog.create_table(
        f"rebucket_{next(_names)}", SCHEMA, ["day", "id"], [], {"base.buckets": 2, **HASH_TREE}
    )
    model = Model()
    model.upsert(table, [3] * 5000, np.arange(5000), "v1")
    firn.compact(table)
    assert {e.node.m for e in live_entries(table)} == {2}
    table.set_properties({"base.buckets": 8, "change.buckets": 16})
    assert firn.compact(table)["plans"] == [], "major has nothing to do without changes"
    model.upsert(table, [3] * 10, np.arange(10), "v2")
    firn.compact(table, kind="full")
    model.check(table)
    nodes = {e.node for e in live_entries(table)}
    assert {n.m for n in nodes} == {8}
    assert len(nodes) == 8


def test_a_small_partition_keeps_its_base_at_the_root_until_it_grows(
    catalog: firn.Catalog,
) -> None:
    """``base.split-bytes``: below it a partition's fold is one task writing one base
    file at the root (the metrics do not call that misplaced); once the partition is
    past it, the next fold writes at ``base.buckets``, reading the root file from each
    node's task, and the layout triggers ask for that re-bucketing themselves."""
    table = catalog.create_table(
        f"small_root_{next(_names)}",
        SCHEMA,
        ["day", "id"],
        ["day"],
        {"base.buckets": 4, "change.buckets": 4, "base.split-bytes": "1GiB"},
    )
    model = Model()
    for round_ in range(3):
        model.upsert(table, [1] * 300, np.arange(round_ * 100, round_ * 100 + 300), f"r{round_}")
        model.delete(table, [1] * 20, np.arange(round_ * 50, round_ * 50 + 20))
        result = firn.compact(table, kind="major", engine="local")
        assert [plan["tasks"] for plan in result["plans"]] == [1]
        assert {(e.store, e.node.m) for e in live_entries(table)} == {("base", 1)}
        model.check(table)
    (state,) = partition_states(table.catalog.conn, table.table_id, table.properties).values()
    assert state.metrics.misplaced_base_files == 0

    table.set_properties({"base.split-bytes": "1KiB"})  # the partition is now past it
    (state,) = partition_states(table.catalog.conn, table.table_id, table.properties).values()
    assert state.metrics.misplaced_base_files == 1
    assert decide(state.metrics, table.properties).kind == Kind.FULL
    model.upsert(table, [1] * 10, np.arange(10), "grown")
    result = firn.compact(table, kind="major", engine="local")
    assert [plan["tasks"] for plan in result["plans"]] == [4]
    assert {(e.store, e.node.m) for e in live_entries(table)} == {("base", 4)}
    model.check(table)


def test_a_quiet_partition_never_folded_folds_once_its_oldest_change_is_old(
    catalog: firn.Catalog,
) -> None:
    """Below ``major.change-bytes-lowest`` a partition never folded waits for
    ``minor.file-count`` runs; one that goes quiet first is due once its oldest
    unmerged commit is ``major.interval-max`` old (the catalog's commit time, or as
    old as can be once retention pruned that commit's snapshot row), and ``auto``
    folds it as the services would."""
    table = catalog.create_table(
        f"quiet_first_fold_{next(_names)}",
        SCHEMA,
        ["day", "id"],
        ["day"],
        {"major.change-bytes-lowest": "64KiB", "major.interval-max": 3600},
    )
    model = Model()
    model.upsert(table, [1] * 20, np.arange(20), "a")
    model.upsert(table, [1] * 20, np.arange(10, 30), "b")
    conn = table.catalog.conn

    def state() -> Any:
        (found,) = partition_states(conn, table.table_id, table.properties).values()
        return found

    waited = state().metrics.oldest_change_seconds
    assert waited is not None
    assert 0.0 <= waited < 60.0
    assert decide(state().metrics, table.properties).kind is None
    assert firn.compact(table, kind="auto", engine="local")["plans"] == []

    first = min(e.seq for e in live_entries(table) if e.store == "change")
    conn.execute(
        "UPDATE snapshot SET created_at = created_at - interval '2 hours' "
        "WHERE table_id = %s AND kind = 'commit' AND seq = %s",
        (table.table_id, first),
    )
    assert state().metrics.oldest_change_seconds >= 7200.0
    assert decide(state().metrics, table.properties).kind is Kind.MAJOR
    conn.execute(
        "DELETE FROM snapshot WHERE table_id = %s AND kind = 'commit' AND seq = %s",
        (table.table_id, first),
    )
    assert state().metrics.oldest_change_seconds > 10 * 365 * 86400.0
    assert [p["tasks"] for p in firn.compact(table, kind="auto", engine="local")["plans"]] == [1]
    assert {e.store for e in live_entries(table)} == {"base"}
    assert state().metrics.oldest_change_seconds is None
    model.check(table)


def test_each_task_row_names_its_own_partition(catalog: firn.Catalog) -> None:
    """A task's partition is on its own row (migration 0020), equal to its spec's;
    the waiting tasks of a partition and the events announcing them carry it."""
    table = catalog.create_table(
        f"task_partitions_{next(_names)}", SCHEMA, ["day", "id"], ["day"], {"base.buckets": 2}
    )
    model = Model()
    for day in (1, 2, 3):
        model.upsert(table, [day] * 50, np.arange(50), f"d{day}")
    conn = table.catalog.conn
    for key in sorted(partitions_of(conn, table.table_id)):
        record = compaction.plan(conn, table, key, Kind.MAJOR)
        assert isinstance(record, PlanRecord)
        waiting = waiting_tasks(conn, table.table_id, [key])
        assert [t.task_id for t in waiting] == [t.task_id for t in record.tasks]
        assert {t.partition_key for t in waiting} == {key}
        assert {t.event(table.name, table.table_id).partition_key for t in waiting} == {key}
    rows = conn.execute(
        "SELECT t.partition_key, t.spec->>'partition_key', p.partition_key "
        "FROM compaction_task t JOIN compaction_plan p USING (plan_id) WHERE p.table_id = %s",
        (table.table_id,),
    ).fetchall()
    assert len({row[0] for row in rows}) == 3
    assert all(row[0] == row[1] == row[2] for row in rows)
    firn.compact(table, engine="local")
    model.check(table)


def test_a_plan_whose_input_another_commit_removed_fails_alone(catalog: firn.Catalog) -> None:
    """Plans committing together whose inputs another commit removed meanwhile: that
    plan fails its checks, the other commits, and the failed one's partition keeps its
    files and merged seq."""
    table = catalog.create_table(
        f"removed_{next(_names)}", SCHEMA, ["day", "id"], ["day"], {"base.buckets": 2}
    )
    model = Model()
    for tag in ("v1", "v2"):
        for day in (1, 2):
            model.upsert(table, [day] * 40, np.arange(40 * day, 40 * day + 40), tag)
    conn = table.catalog.conn
    keys = sorted(partitions_of(conn, table.table_id))
    plans = []
    for key in keys:
        record = compaction.plan(conn, table, key, Kind.MAJOR)
        assert isinstance(record, PlanRecord)
        compaction.release(conn, record)
        _run(table, record)
        plans.append(record)
    kept, robbed = plans
    # Another commit removed one of the second plan's inputs (by hand here: what a load
    # replacing the partition does to the file's row), then restores it below.
    victim = robbed.tasks[0].change_files[0].file_id
    conn.execute(
        "UPDATE data_file SET removed_snapshot = %s WHERE file_id = %s",
        (table.current_snapshot(), victim),
    )
    outcomes = {o.plan_id: o for o in compaction.commit_with_ready(conn, kept.plan_id)}
    assert outcomes[kept.plan_id].outcome == "committed"
    assert outcomes[robbed.plan_id].outcome == "failed"
    assert outcomes[robbed.plan_id].reason == "an input file was removed by another commit"
    merged = dict(
        conn.execute(
            "SELECT partition_key, max_merged_seq FROM catalog_partition WHERE table_id = %s",
            (table.table_id,),
        ).fetchall()
    )
    assert merged[keys[0]] > 0
    assert merged[keys[1]] == 0
    conn.execute("UPDATE data_file SET removed_snapshot = NULL WHERE file_id = %s", (victim,))
    model.check(table)


def test_the_ready_plans_of_a_table_commit_together_and_a_failing_one_alone(
    catalog: firn.Catalog,
) -> None:
    """Plans of several partitions of one table that are ready commit in one
    transaction and one snapshot, each advancing its own partition and announced
    with its own; one failing its checks fails alone; one still running waits."""
    table = catalog.create_table(
        f"together_{next(_names)}", SCHEMA, ["day", "id"], ["day"], {"base.buckets": 2}
    )
    model = Model()
    for tag in ("v1", "v2"):
        for day in (1, 2, 3, 4):
            model.upsert(table, [day] * 40, np.arange(40 * day, 40 * day + 40), tag)
    conn = table.catalog.conn
    keys = sorted(partitions_of(conn, table.table_id))
    plans = {}
    for key in keys:
        record = compaction.plan(conn, table, key, Kind.MAJOR)
        assert isinstance(record, PlanRecord)
        compaction.release(conn, record)
        plans[key] = record
    first, second, overtaken, waiting = (plans[k] for k in keys)
    for record in (first, second, overtaken):
        _run(table, record)
    # Something else folds the third partition first: its plan then fails its checks.
    conn.execute(
        "UPDATE compaction_plan SET state = 'Replaced' WHERE plan_id = %s", (overtaken.plan_id,)
    )
    newer = compaction.plan(conn, table, keys[2], Kind.MAJOR)
    assert isinstance(newer, PlanRecord)
    compaction.release(conn, newer)
    _run(table, newer)
    assert commit_plan(conn, newer.plan_id).outcome == "committed"
    conn.execute(
        "UPDATE compaction_plan SET state = 'Executing' WHERE plan_id = %s", (overtaken.plan_id,)
    )
    before = table.current_snapshot()

    outcomes = compaction.commit_with_ready(conn, first.plan_id)
    by_plan = {o.plan_id: o for o in outcomes}
    assert outcomes[0].plan_id == first.plan_id
    assert set(by_plan) == {first.plan_id, second.plan_id, overtaken.plan_id}
    assert by_plan[first.plan_id].outcome == by_plan[second.plan_id].outcome == "committed"
    assert by_plan[overtaken.plan_id].outcome == "failed"
    snapshot = table.current_snapshot()
    assert snapshot == before + 1, "the ready plans share one snapshot"
    assert by_plan[first.plan_id].snapshot_id == by_plan[second.plan_id].snapshot_id == snapshot
    merged = conn.execute(
        "SELECT partition_key FROM partition_merge_history WHERE table_id = %s "
        "AND snapshot_id = %s ORDER BY partition_key",
        (table.table_id, snapshot),
    ).fetchall()
    assert [m[0] for m in merged] == keys[:2]
    summary = conn.execute(
        "SELECT summary FROM snapshot WHERE table_id = %s AND snapshot_id = %s",
        (table.table_id, snapshot),
    ).fetchone()
    assert summary is not None
    assert [p["partition"] for p in plan_summaries(summary[0])] == keys[:2]
    for key, record in zip(keys[:2], (first, second), strict=True):
        event = compaction_event(conn, record.plan_id)
        assert event is not None
        assert (event.partition_key, event.snapshot_id) == (key, snapshot)
        assert event.added_rows == 40  # v2 rewrote the same 40 keys
    states = dict(
        conn.execute(
            "SELECT plan_id, state FROM compaction_plan WHERE plan_id = ANY(%s)",
            ([overtaken.plan_id, waiting.plan_id],),
        ).fetchall()
    )
    assert states == {overtaken.plan_id: "Failed", waiting.plan_id: "Planned"}
    model.check(table)
    # Again: nothing new, and the waiting plan commits once it has run.
    again = compaction.commit_with_ready(conn, second.plan_id)
    assert [o.outcome for o in again] == ["already"]
    _run(table, waiting)
    assert [o.outcome for o in compaction.commit_with_ready(conn, waiting.plan_id)] == ["committed"]
    model.check(table)


def test_unkeyed_tables_bin_pack_small_files(catalog: firn.Catalog) -> None:
    schema = pa.schema([pa.field("line", pa.string()), pa.field("n", pa.int64())])
    table = catalog.create_table(f"log_{next(_names)}", schema, [], [])
    expected = []
    for batch in range(12):
        rows = [(f"event {batch}-{i}", batch * 100 + i) for i in range(100)]
        table.upsert(pa.table({"line": [r[0] for r in rows], "n": [r[1] for r in rows]}))
        expected.extend(rows)
    assert len(live_entries(table)) == 12
    summary = firn.compact(table)
    assert summary["plans"][0]["outcome"] == "committed"
    entries = live_entries(table)
    assert [e.store for e in entries] == ["base"]
    got = table.read()
    rows = zip(got.column("line").to_pylist(), got.column("n").to_pylist(), strict=True)
    assert sorted(rows) == sorted(expected)


def _plan(table: firn.Table) -> PlanRecord:
    record = plan_now(table.catalog.conn, table, "", "major")
    assert isinstance(record, PlanRecord)
    release_tasks(table.catalog.conn, record)
    return record


def _run(table: firn.Table, record: PlanRecord, owner: str = "test") -> None:
    conn = table.catalog.conn
    claims = [c for t in record.tasks if (c := claim_task(conn, t.task_id, owner, 60)) is not None]
    for result in run_local(table.definition, claims, KernelLimits()):
        assert record_result(conn, result, max_attempts=3) == "prepared"


def test_a_merge_of_runs_leaves_the_merged_seq_and_says_so(catalog: firn.Catalog) -> None:
    table = catalog.create_table(f"minor_{next(_names)}", SCHEMA, ["day", "id"], [])
    model = Model()
    for round_ in range(2):
        model.upsert(table, [1] * 50, np.arange(50), f"v{round_}")
    record = plan_now(table.catalog.conn, table, "", "minor")
    assert isinstance(record, PlanRecord)
    release_tasks(table.catalog.conn, record)
    _run(table, record)
    outcome = commit_plan(catalog.conn, record.plan_id)
    assert (outcome.outcome, outcome.merged_seq_advanced) == ("committed", False)
    model.check(table)


def test_committing_a_plan_twice_changes_nothing(catalog: firn.Catalog) -> None:
    table = catalog.create_table(f"twice_{next(_names)}", SCHEMA, ["day", "id"], [])
    model = Model()
    model.upsert(table, [1] * 100, np.arange(100), "v1")
    record = _plan(table)
    _run(table, record)
    first = commit_plan(catalog.conn, record.plan_id)
    assert first.outcome == "committed"
    assert first.merged_seq_advanced  # the committer observes the commits' waits
    # The event the commit made is the one read back later (a redelivery announces that).
    read_back = compaction_event(catalog.conn, record.plan_id)
    assert first.event is not None
    assert read_back is not None
    each_its_own = {"event_id", "produced_at"}
    assert first.event.model_dump(exclude=each_its_own) == read_back.model_dump(
        exclude=each_its_own
    )
    snapshot = table.current_snapshot()
    again = commit_plan(catalog.conn, record.plan_id)
    assert (again.outcome, again.snapshot_id) == ("already", first.snapshot_id)
    assert table.current_snapshot() == snapshot
    model.check(table)
    transitions = catalog.conn.execute(
        "SELECT to_state, attempt FROM state_transition WHERE machine = 'task' "
        "AND entity_id = %s ORDER BY transition_id",
        (record.tasks[0].task_id,),
    ).fetchall()
    assert transitions == [
        ("Init", 0),
        ("Pending", 0),
        ("Executing", 1),
        ("Prepared", 1),
        ("Committed", 1),
    ]
    steps = catalog.conn.execute(
        "SELECT from_state, to_state, reason FROM state_transition WHERE machine = 'plan' "
        "AND entity_id = %s ORDER BY transition_id",
        (record.plan_id,),
    ).fetchall()
    assert steps[-2:] == [
        ("Executing", "Committing", "all tasks prepared"),
        ("Committing", "Committed", "committed"),
    ]


def test_a_plan_overtaken_by_another_fails_and_its_outputs_become_orphans(
    catalog: firn.Catalog,
) -> None:
    table = catalog.create_table(f"stale_{next(_names)}", SCHEMA, ["day", "id"], [])
    model = Model()
    model.upsert(table, [1] * 100, np.arange(100), "v1")
    old = _plan(table)
    _run(table, old)
    # Something else folds the same changes first (e.g. a plan whose tasks were
    # still open is replaced by the operator's manual compaction).
    catalog.conn.execute(
        "UPDATE compaction_plan SET state = 'Replaced' WHERE plan_id = %s", (old.plan_id,)
    )
    newer = _plan(table)
    _run(table, newer)
    assert commit_plan(catalog.conn, newer.plan_id).outcome == "committed"
    catalog.conn.execute(
        "UPDATE compaction_plan SET state = 'Executing' WHERE plan_id = %s", (old.plan_id,)
    )
    outcome = commit_plan(catalog.conn, old.plan_id)
    assert outcome.outcome == "failed"
    assert "max_merged_seq moved" in outcome.reason
    model.check(table)
    state = catalog.conn.execute(
        "SELECT state FROM compaction_plan WHERE plan_id = %s", (old.plan_id,)
    ).fetchone()
    assert state == ("Failed",)
    orphans = {p for (p,) in catalog.conn.execute("SELECT path FROM orphan_file").fetchall()}
    outputs = {
        o["path"]
        for (o,) in catalog.conn.execute(
            "SELECT jsonb_array_elements(outputs) FROM compaction_task WHERE plan_id = %s",
            (old.plan_id,),
        ).fetchall()
    }
    assert outputs
    assert outputs <= orphans
    # The partition is free to be planned and compacted again.
    model.upsert(table, [1] * 5, np.arange(5), "v3")
    assert firn.compact(table)["plans"][0]["outcome"] == "committed"
    model.check(table)


def test_failed_attempts_retry_then_fail_the_plan(catalog: firn.Catalog) -> None:
    table = catalog.create_table(f"retry_{next(_names)}", SCHEMA, ["day", "id"], [])
    Model().upsert(table, [1] * 10, np.arange(10), "v1")
    record = _plan(table)
    conn = catalog.conn
    task = record.tasks[0]
    for attempt in (1, 2):
        claim = claim_task(conn, task.task_id, "test", 60)
        assert claim is not None
        assert claim[1] == attempt
        # A claim by a second executor loses: the task is no longer Pending.
        assert claim_task(conn, task.task_id, "other", 60) is None
        result = TaskResult(task_id=task.task_id, attempt=attempt, error="boom")
        expected = "retry" if attempt == 1 else "failed"
        assert record_result(conn, result, max_attempts=2) == expected
        if expected == "retry":
            # Backing off: nobody may claim it yet. Then the backoff passes.
            assert claim_task(conn, task.task_id, "other", 60) is None
            _backoff_passes(conn, task.task_id)
    plan_state = conn.execute(
        "SELECT state FROM compaction_plan WHERE plan_id = %s", (record.plan_id,)
    ).fetchone()
    assert plan_state == ("Failed",)
    # A late result of attempt 1 is stale and changes nothing.
    late = TaskResult(task_id=task.task_id, attempt=1)
    assert record_result(conn, late, max_attempts=2) == "stale"


def test_a_batch_is_claimed_and_recorded_together_each_task_on_its_own_terms(
    catalog: firn.Catalog,
) -> None:
    """A dispatcher's batch takes one transaction to claim and one to record (the
    per-task commits were what small merges paid most); each task still gets what a
    claim or result of its own would have: a task claimed elsewhere is left out, and
    one result's retry or staleness does not touch the others."""
    conn = catalog.conn
    records = []
    for n in range(3):
        table = catalog.create_table(f"batch_{next(_names)}", SCHEMA, ["day", "id"], [])
        Model().upsert(table, [1] * 10, np.arange(10) + n, "v1")
        records.append(_plan(table))
    first, second, third = (r.tasks[0].task_id for r in records)
    assert claim_task(conn, third, "other", 60) is not None
    claims = claim_tasks(conn, [first, second, third], "batch", 60)
    assert [(spec.task_id, attempt) for spec, attempt in claims] == [(first, 1), (second, 1)]
    results = [
        TaskResult(task_id=first, attempt=1),
        TaskResult(task_id=second, attempt=1, error="boom"),
        TaskResult(task_id=third, attempt=2),  # no such attempt: "other" holds attempt 1
    ]
    assert record_results(conn, results, max_attempts=3) == ["prepared", "retry", "stale"]
    states = dict(
        conn.execute(
            "SELECT task_id, state FROM compaction_task WHERE task_id = ANY(%s)",
            ([first, second, third],),
        ).fetchall()
    )
    assert states == {first: "Prepared", second: "Pending", third: "Executing"}


def test_a_batch_of_successes_is_recorded_at_once_and_a_stale_one_still_orphaned(
    catalog: firn.Catalog,
) -> None:
    """A batch whose every task succeeded is recorded in one statement; each task
    still gets what a result of its own would have: one whose attempt no longer owns
    the task is stale and leaves the task to its new attempt, and each move that
    happened has its history row, at its attempt."""
    conn = catalog.conn
    tables, records = [], []
    for n in range(3):
        table = catalog.create_table(f"all_done_{next(_names)}", SCHEMA, ["day", "id"], [])
        Model().upsert(table, [1] * 10, np.arange(10) + n, "v1")
        tables.append(table)
        records.append(_plan(table))
    first, second, third = (r.tasks[0].task_id for r in records)
    claims = claim_tasks(conn, [first, second, third], "batch", 60)
    assert [attempt for _, attempt in claims] == [1, 1, 1]
    pairs = zip(tables, claims, strict=True)
    done = [run_local(t.definition, [c], KernelLimits())[0] for t, c in pairs]
    assert all(r.ok and r.outputs for r in done)
    # The third task's lease ran out and another executor took it over: attempt 2.
    expired = conn.execute(
        "UPDATE compaction_task SET lease_expires = now() - interval '1 second' WHERE task_id = %s",
        (third,),
    )
    assert expired.rowcount == 1
    assert expire_leases(conn)
    again = claim_task(conn, third, "other", 60)
    assert again is not None
    assert again[1] == 2
    outcomes = record_results(conn, done, max_attempts=3)
    assert outcomes == ["prepared", "prepared", "stale"]
    states = dict(
        conn.execute(
            "SELECT task_id, state FROM compaction_task WHERE task_id = ANY(%s)",
            ([first, second, third],),
        ).fetchall()
    )
    assert states == {first: "Prepared", second: "Prepared", third: "Executing"}
    history = conn.execute(
        "SELECT entity_id, attempt FROM state_transition WHERE machine = 'task' "
        "AND to_state = 'Prepared' AND entity_id = ANY(%s) ORDER BY entity_id",
        ([first, second, third],),
    ).fetchall()
    assert history == [(first, 1), (second, 1)]


@pytest.mark.parametrize("failure_first", [False, True])
def test_a_task_that_fails_its_plan_orphans_the_outputs_of_its_batch_mates(
    catalog: firn.Catalog, failure_first: bool
) -> None:
    """A task that fails its plan for good, first or last in its batch, fails the
    plan, and what the batch's other task of that plan wrote becomes an orphan, never
    registered (a task recorded after its plan failed keeps its Prepared state, in a
    plan that never commits)."""
    conn = catalog.conn
    table = catalog.create_table(
        f"fails_{next(_names)}", SCHEMA, ["day", "id"], [], {"base.buckets": 2, **HASH_TREE}
    )
    Model().upsert(table, [1] * 40, np.arange(40), "v1")
    record = _plan(table)
    done_id, failed_id = (t.task_id for t in record.tasks)
    claims = claim_tasks(conn, [done_id, failed_id], "batch", 60)
    assert [spec.task_id for spec, _ in claims] == [done_id, failed_id]
    (done,) = run_local(table.definition, claims[:1], KernelLimits())
    assert done.ok
    failed = TaskResult(task_id=failed_id, attempt=1, error="bad input", retryable=False)
    results = [failed, done] if failure_first else [done, failed]
    outcomes = dict(
        zip([r.task_id for r in results], record_results(conn, results, 3), strict=True)
    )
    assert outcomes == {done_id: "prepared", failed_id: "failed"}
    (plan_state,) = conn.execute(
        "SELECT state FROM compaction_plan WHERE plan_id = %s", (record.plan_id,)
    ).fetchone() or (None,)
    assert plan_state == "Failed"
    orphans = {
        path
        for (path,) in conn.execute(
            "SELECT path FROM orphan_file WHERE table_id = %s", (table.table_id,)
        ).fetchall()
    }
    written = {p for o in done.outputs for p in o.written_paths()}
    assert written
    assert written <= orphans


def test_dispatchers_claiming_one_batch_in_opposite_orders_split_it_without_deadlock(
    catalog: firn.Catalog, settings: FirnSettings
) -> None:
    """Two dispatchers take overlapping batches at once, one in the order the other
    reverses: claims lock the batch's plans first, in plan id order, so neither waits
    on the other in a cycle (Postgres would abort one with a deadlock), and every task
    goes to exactly one of them, round after round."""
    records = []
    for n in range(6):
        table = catalog.create_table(f"race_{next(_names)}", SCHEMA, ["day", "id"], [])
        Model().upsert(table, [1] * 10, np.arange(10) + n, "v1")
        records.append(_plan(table))
    task_ids = [r.tasks[0].task_id for r in records]
    plan_ids = [r.plan_id for r in records]
    orders = {"forward": task_ids, "backward": task_ids[::-1]}
    with (
        firn.connect(warehouse=catalog.warehouse, settings=settings) as first,
        firn.connect(warehouse=catalog.warehouse, settings=settings) as second,
    ):
        dispatchers = {"forward": first, "backward": second}
        for _ in range(20):
            start = threading.Barrier(2, timeout=30)
            got: dict[str, list[int]] = {}
            threads = [
                threading.Thread(
                    target=_claim_at_once, args=(dispatchers[o], o, orders[o], start, got)
                )
                for o in orders
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert set(got) == set(orders), "a claim raised (see the thread's error above)"
            assert sorted(got["forward"] + got["backward"]) == sorted(task_ids)
            # Back to the start for the next round.
            catalog.conn.execute(
                "UPDATE compaction_task SET state = 'Pending' WHERE task_id = ANY(%s)", (task_ids,)
            )
            catalog.conn.execute(
                "UPDATE compaction_plan SET state = 'Planned' WHERE plan_id = ANY(%s)", (plan_ids,)
            )


def _claim_at_once(
    catalog: firn.Catalog,
    owner: str,
    order: list[int],
    start: threading.Barrier,
    got: dict[str, list[int]],
) -> None:
    start.wait()
    got[owner] = [spec.task_id for spec, _ in claim_tasks(catalog.conn, order, owner, 60)]


def _backoff_passes(conn: Connection, task_id: int) -> None:
    conn.execute("UPDATE compaction_task SET not_before = now() WHERE task_id = %s", (task_id,))


def test_status_shows_score_due_open_plan_and_last_compaction(catalog: firn.Catalog) -> None:
    # Folding at its first commit (no major.change-bytes-lowest to wait under).
    eager = {"base.buckets": 2, "major.change-bytes-lowest": 0}
    table = catalog.create_table(f"status_{next(_names)}", SCHEMA, ["day", "id"], [], eager)
    Model().upsert(table, [1] * 100, np.arange(100), "v1")
    (part,) = table.status()["partitions"]
    assert part["due"] == "major"
    assert any("last major never" in r for r in part["reasons"])
    assert part["score"] > 0
    assert part["open_plan"] is None
    assert part["last_compaction"] is None

    record = _plan(table)
    (part,) = table.status()["partitions"]
    assert part["open_plan"]["plan_id"] == record.plan_id
    assert part["open_plan"]["tasks"] == {"Pending": len(record.tasks)}

    _run(table, record)
    assert commit_plan(catalog.conn, record.plan_id).outcome == "committed"
    (part,) = table.status()["partitions"]
    assert part["open_plan"] is None
    assert part["last_compaction"]["plan_id"] == record.plan_id
    assert (part["unmerged_files"], part["score"], part["due"]) == (0, 0.0, None)
    assert part["base_files"] == len(live_entries(table))


def test_a_task_finishing_after_its_plan_failed_leaves_orphans(catalog: firn.Catalog) -> None:
    table = catalog.create_table(f"late_{next(_names)}", SCHEMA, ["day", "id"], [])
    Model().upsert(table, [1] * 10, np.arange(10), "v1")
    record = _plan(table)
    conn = catalog.conn
    claim = claim_task(conn, record.tasks[0].task_id, "slow", 60)
    assert claim is not None
    fail_plan(conn, record.plan_id, "operator gave up", by=Actor.DISPATCHER)
    (result,) = run_local(table.definition, [claim], KernelLimits())
    assert record_result(conn, result, max_attempts=3) == "prepared"
    orphans = {p for (p,) in conn.execute("SELECT path FROM orphan_file").fetchall()}
    assert {o.path for o in result.outputs} <= orphans
    assert commit_plan(conn, record.plan_id).outcome == "stale"


def test_an_expired_lease_returns_the_task_and_its_late_result_is_stale(
    catalog: firn.Catalog,
) -> None:
    table = catalog.create_table(
        f"lease_{next(_names)}", SCHEMA, ["day", "id"], [], {"base.buckets": 1}
    )
    model = Model()
    model.upsert(table, [1] * 10, np.arange(10), "v1")
    record = _plan(table)
    conn = catalog.conn
    task_id = record.tasks[0].task_id
    claim = claim_task(conn, task_id, "dying", 60)
    assert claim is not None
    assert extend_lease(conn, task_id, 1, "dying", 60)
    assert not extend_lease(conn, task_id, 1, "someone-else", 60)
    assert expire_leases(conn) == []  # not expired yet
    conn.execute(
        "UPDATE compaction_task SET lease_expires = now() - interval '1 s' WHERE task_id = %s",
        (task_id,),
    )
    assert expire_leases(conn) == [task_id]
    assert not extend_lease(conn, task_id, 1, "dying", 60)
    # Back to Pending just now, so not stale; announced again at once as just expired.
    assert stale_waiting_tasks(conn, 3600) == []
    (again,) = stale_waiting_tasks(conn, 3600, now_due=[task_id])
    assert (again.task_id, again.state, again.attempt) == (task_id, TaskState.PENDING, 1)
    # A second executor takes attempt 2 and finishes; the first one's result is stale.
    second = claim_task(conn, task_id, "healthy", 60)
    assert second is not None
    assert second[1] == 2
    (late,) = run_local(table.definition, [claim], KernelLimits())
    (done,) = run_local(table.definition, [second], KernelLimits())
    assert record_result(conn, late, max_attempts=3) == "stale"
    assert record_result(conn, done, max_attempts=3) == "prepared"
    assert commit_plan(conn, record.plan_id).outcome == "committed"
    model.check(table)
    orphans = {p for (p,) in conn.execute("SELECT path FROM orphan_file").fetchall()}
    assert {o.path for o in late.outputs} <= orphans


def test_a_plan_drafted_before_a_merge_of_runs_committed_is_not_stored(
    catalog: firn.Catalog,
) -> None:
    # A merge of runs removes the change files it read without moving the merged seq.
    # A major drafted from before it names those files; stored, it would fail its
    # commit ("an input file was removed by another commit"), as two planners and a
    # committer once raced to in the broker-failover test.
    table = catalog.create_table(
        f"race_{next(_names)}", SCHEMA, ["day", "id"], [], {"change.buckets": 1}
    )
    model = Model()
    for n in range(4):
        model.upsert(table, [1] * 20, np.arange(n * 10, n * 10 + 20), f"v{n}")
    conn = catalog.conn
    drafted_at = current_snapshot(conn, table.table_id)
    draft = draft_now(conn, table, "", "major")
    assert draft is not None
    drafted_files = {f.file_id for t in draft.tasks for f in t.change_files}

    minor = firn.compact(table, kind="minor", engine="local")
    assert [p["outcome"] for p in minor["plans"]] == ["committed"]
    live = {e.file_id for e in live_entries(table)}
    assert drafted_files - live, "the merge of runs removed files the draft names"

    stale = store_draft(conn, table, draft, drafted_at)
    assert isinstance(stale, PlanSkipped), stale
    assert stale.reason == "stale: the partition was compacted since"
    # Drafted afresh, the major plans and commits.
    assert [p["outcome"] for p in firn.compact(table, engine="local")["plans"]] == ["committed"]
    model.check(table)
