"""The table commands of the ``firn`` CLI on the real stack: ``firn.cli.main`` run as a
user would, configured through FIRN_ variables, its output read back."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import firn
from firn.catalog.orphans import record_orphans
from firn.catalog.plans import fail_plan
from firn.cli import main
from firn.engine.planning import plan_now
from firn.events.plans import PlanRequestEvent
from firn.events.schemas import validate
from firn.kafka import Topics
from firn.model.plans import PlanRecord
from firn.model.states import Actor
from firn.settings import FirnSettings
from tests.hash_tree import HASH_TREE
from tests.waiting import messages_on

SCHEMA = "region:string,id:int64,amount:double"
ARROW = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
    ]
)


@pytest.fixture
def catalog(cli_settings: FirnSettings) -> Iterator[firn.Catalog]:
    with firn.connect(settings=cli_settings) as catalog:
        yield catalog


Run = Callable[..., tuple[int, Any]]


@pytest.fixture
def run(cli_settings: FirnSettings, capsys: pytest.CaptureFixture[str]) -> Run:
    """``firn ARGS --json``: the exit status and the one JSON document it printed."""

    def invoke(*argv: str) -> tuple[int, Any]:
        code = main([*argv, "--json"])
        out = capsys.readouterr().out
        return code, json.loads(out)

    return invoke


def rows(region: str, ids: range, tag: float) -> pa.Table:
    return pa.table(
        {"region": [region] * len(ids), "id": list(ids), "amount": [tag + i for i in ids]},
        schema=ARROW,
    )


def make_orders(run: Run, catalog: firn.Catalog, name: str = "orders") -> firn.Table:
    # Folding as soon as the ratio says: a commit or two make a partition due, which
    # is what the status commands are shown with.
    code, created = run(
        "table", "create", name, "--schema", SCHEMA, "--primary-key", "region,id",
        "--partition-by", "region", "--property", "base.buckets=2",
        "--property", "major.change-bytes-lowest=0",
    )  # fmt: skip
    assert code == 0, created
    return catalog.table(name)


def test_table_create_list_show(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    code, created = run(
        "table", "create", "orders", "--schema", SCHEMA, "--primary-key", "region,id",
        "--partition-by", "region", "--property", "change.buckets=8",
        "--property", "snapshot.retention=1h",
    )  # fmt: skip
    assert code == 0
    assert created["created"] is True
    assert created["columns"] == [
        {"name": "region", "type": "string", "nullable": False},
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "amount", "type": "double", "nullable": True},
    ]
    assert (created["primary_key"], created["partition_by"]) == (["region", "id"], ["region"])
    assert created["properties"]["change.buckets"] == 8
    assert created["properties"]["snapshot.retention"] == 3600
    assert (created["files"], created["snapshot"]) == (0, 0)
    # What the CLI created is what the Python API sees.
    table = catalog.table("orders")
    assert table.schema.equals(ARROW)
    assert table.properties.change_buckets == 8

    table.upsert(rows("eu", range(100), 0.5))
    table.upsert(rows("us", range(50), 1.5))
    assert run("table", "create", "events", "--schema", "v:string", "--append-only")[0] == 0
    code, listed = run("table", "list")
    assert code == 0
    assert [t["name"] for t in listed["tables"]] == ["events", "orders"]
    files = table.files()
    orders = listed["tables"][1]
    assert orders["files"] == files.num_rows > 0
    assert orders["bytes"] == sum(files.column("size").to_pylist())
    assert orders["partitions"] == 2
    assert orders["snapshot"] == 2
    assert listed["tables"][0]["primary_key"] == []

    code, shown = run("table", "show", "orders")
    assert code == 0
    assert shown["stores"]["change"]["files"] == files.num_rows
    assert shown["stores"]["base"] == {"files": 0, "bytes": 0}
    assert shown["location"] == table.location

    assert main(["table", "show", "orders"]) == 0
    text = capsys.readouterr().out
    assert "primary key   region, id" in text
    assert re.search(r"^change\.buckets +8$", text, re.M)


def test_table_set_changes_the_named_tables_or_all(run: Run, catalog: firn.Catalog) -> None:
    make_orders(run, catalog, "a")
    make_orders(run, catalog, "b")
    make_orders(run, catalog, "c")
    code, doc = run("table", "set", "a", "b", "--property", "minor.file-count=7")
    assert code == 0, doc
    assert doc["set"] == {"minor.file-count": "7"}
    assert [t["name"] for t in doc["tables"]] == ["a", "b"]
    assert doc["tables"][0]["properties"]["minor.file-count"] == 7
    assert doc["tables"][0]["properties"]["base.buckets"] == 2  # the rest kept
    files = {n: catalog.table(n).properties.minor_file_count for n in "abc"}
    assert files == {"a": 7, "b": 7, "c": 10}

    code, doc = run(
        "table", "set", "--all", "--property", "major.change-bytes-lowest=128KiB",
        "--property", "minor.file-count=8",
    )  # fmt: skip
    assert code == 0, doc
    assert [t["name"] for t in doc["tables"]] == ["a", "b", "c"]
    for name in "abc":
        properties = catalog.table(name).properties
        assert (properties.major_change_bytes_lowest, properties.minor_file_count) == (131072, 8)

    # Refused before anything changes: a bad value, no table named, both ways named.
    for args in (
        ["a", "--property", "minor.file-count=0"],
        ["--property", "minor.file-count=3"],
        ["a", "--all", "--property", "minor.file-count=3"],
    ):
        code, doc = run("table", "set", *args)
        assert code == 1, args
    assert {catalog.table(n).properties.minor_file_count for n in "abc"} == {8}
    # An unknown table stops the command; the tables before it keep the change.
    code, doc = run("table", "set", "a", "nope", "b", "--property", "minor.file-count=4")
    assert code == 1
    assert doc["error"] == "no table named 'nope' (changed before it: a)"
    assert [catalog.table(n).properties.minor_file_count for n in "ab"] == [4, 8]


def test_table_errors(run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("table", "show", "nope") == (1, {"error": "no table named 'nope'"})
    assert main(["table", "show", "nope"]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == "firn: error: no table named 'nope'"
    assert captured.out == ""

    make_orders(run, catalog)
    code, doc = run("table", "create", "orders", "--schema", SCHEMA, "--primary-key", "id")
    assert code == 1
    assert "already exists" in doc["error"]
    code, doc = run(
        "table", "create", "t2", "--schema", SCHEMA, "--primary-key", "region,id",
        "--property", "change.buckets=3",
    )  # fmt: skip
    assert code == 1
    assert "change.buckets" in doc["error"]
    code, doc = run("table", "create", "t3", "--schema", "v:string", "--primary-key", "id")
    assert code == 1
    assert "'id' is not in the schema" in doc["error"]
    assert catalog.tables() == ["orders"], "a failed create must write nothing"


def test_status_renders_table_status_highest_score_first(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    orders = make_orders(run, catalog)
    for n in range(3):
        orders.upsert(rows("eu", range(n, 60, 3), n))
    orders.upsert(rows("us", range(10), 9.0))
    quiet = make_orders(run, catalog, "quiet")
    quiet.upsert(rows("eu", range(5), 1.0))

    code, doc = run("status", "orders")
    assert code == 0
    (status,) = doc["tables"]
    expected = orders.status()
    assert (status["table"], status["seq"], status["snapshot"]) == ("orders", 4, 4)
    by_partition = {p["partition"]: p for p in expected["partitions"]}
    assert [p["partition"] for p in status["partitions"]] == ["region=eu", "region=us"]
    for p in status["partitions"]:
        assert p == by_partition[p["partition"]]
    eu, us = status["partitions"]
    assert (eu["max_seq"], eu["max_merged_seq"], us["max_seq"]) == (3, 0, 4)
    assert eu["score"] > us["score"] > 0
    assert eu["unmerged_files"] == sum(
        1 for f in orders.files().to_pylist() if f["partition"] == "region=eu"
    )
    assert eu["due"] == "major"
    assert eu["reasons"], "a due partition says why"

    code, everything = run("status")
    assert code == 0
    assert [t["table"] for t in everything["tables"]] == ["orders", "quiet"]

    assert main(["status"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[:2] == ["TABLE", "PARTITION"]
    assert text[1].split()[:3] == ["orders", "region=eu", "0/3"]
    assert run("status", "nope")[0] == 1


def test_status_fleet_shows_the_backlog_across_tables(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    orders = make_orders(run, catalog)
    orders.upsert(rows("eu", range(30), 0.0))
    time.sleep(0.05)  # the two tables' oldest changes are apart
    orders.upsert(rows("us", range(10), 1.0))
    orders.upsert(rows("eu", range(5), 2.0))
    quiet = make_orders(run, catalog, "quiet")
    quiet.upsert(rows("eu", range(5), 1.0))
    folded = make_orders(run, catalog, "folded")
    folded.upsert(rows("us", range(5), 1.0))
    firn.compact(folded, kind="major", engine="local")
    plan = plan_now(catalog.conn, quiet, "region=eu", "major")
    assert isinstance(plan, PlanRecord)

    code, doc = run("status", "--fleet")
    assert code == 0
    fleet = doc["fleet"]
    assert (fleet["tables"], fleet["partitions"]) == (3, 4)
    assert (fleet["partitions_unmerged"], fleet["partitions_due"], fleet["tables_due"]) == (3, 3, 2)
    assert fleet["open_plans"] == 1
    assert sum(fleet["tasks"].values()) >= 1
    oldest = fleet["oldest_due"]
    assert (oldest["table"], oldest["partition"], oldest["due"]) == ("orders", "region=eu", "major")
    debts = {d["table"]: d for d in fleet["debts"]}
    assert list(debts) == ["orders", "quiet"]  # the folded table owes nothing
    assert oldest["waiting_seconds"] == debts["orders"]["oldest_change_seconds"]
    assert debts["orders"]["oldest_change_seconds"] > debts["quiet"]["oldest_change_seconds"]
    per_partition = {p["partition"]: p for p in orders.status()["partitions"]}
    assert debts["orders"]["unmerged_files"] == sum(
        p["unmerged_files"] for p in per_partition.values()
    )
    assert (debts["orders"]["partitions_due"], debts["orders"]["open_plans"]) == (2, 0)
    assert debts["quiet"]["open_plans"] == 1

    code, top = run("status", "--fleet", "--top", "1")
    assert [d["table"] for d in top["fleet"]["debts"]] == ["orders"]
    assert main(["status", "--fleet"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "fleet: 3 tables, 4 partitions"
    assert "waiting longest: orders region=eu, major due" in text[3]
    assert run("status", "orders", "--fleet")[0] == 1


def test_tasks_after_a_compaction(run: Run, catalog: firn.Catalog) -> None:
    orders = make_orders(run, catalog)
    orders.set_properties(HASH_TREE)  # a task per base node, however small
    orders.upsert(rows("eu", range(200), 0.0))
    orders.upsert(rows("us", range(20), 0.0))
    summary = firn.compact(orders, "region=eu", engine="local")
    (plan,) = summary["plans"]
    assert plan["outcome"] == "committed"

    code, doc = run("tasks", "orders")
    assert code == 0
    tasks = doc["tasks"]
    assert len(tasks) == plan["tasks"] == 2
    assert {t["plan_id"] for t in tasks} == {plan["plan_id"]}
    assert {(t["table"], t["partition"], t["plan_kind"]) for t in tasks} == {
        ("orders", "region=eu", "major")
    }
    assert all(
        (t["state"], t["attempt"], t["lease_owner"]) == ("Committed", 1, None) for t in tasks
    )
    assert [t["updated_at"] for t in tasks] == sorted(
        (t["updated_at"] for t in tasks), reverse=True
    )

    assert run("tasks", "--state", "pending")[1] == {"tasks": []}
    assert len(run("tasks", "--state", "Committed", "--limit", "1")[1]["tasks"]) == 1
    assert run("tasks")[1]["tasks"] == tasks
    code, doc = run("tasks", "nope")
    assert code == 1
    assert "nope" in doc["error"]


def test_compact_here(run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]) -> None:
    orders = make_orders(run, catalog)
    for n in range(3):
        orders.upsert(rows("eu", range(n, 90, 2), n))
    orders.delete(pa.table({"region": ["eu"], "id": pa.array([4], pa.int64())}))
    before = orders.read().sort_by("id")

    code, doc = run("compact", "orders", "--here", "--engine", "local")
    assert code == 0
    assert doc["mode"] == "here"
    (plan,) = doc["plans"]
    assert (plan["partition"], plan["outcome"]) == ("region=eu", "committed")
    assert orders.read().sort_by("id").equals(before)
    assert {f["store"] for f in orders.files().to_pylist()} == {"base"}
    assert orders.status()["partitions"][0]["max_merged_seq"] == 4

    assert main(["compact", "orders", "--here", "--engine", "local"]) == 0
    assert "nothing to compact" in capsys.readouterr().out
    code, doc = run("compact", "orders", "--here", "--engine", "local", "--partition", "x=1")
    assert code == 1
    assert "must be written region=..." in doc["error"]
    code, doc = run("compact", "orders", "--here", "--engine", "local", "--partition", "region=us")
    assert code == 1
    assert "no partition 'region=us'" in doc["error"]


def test_a_partition_named_by_key_or_mapping(run: Run, catalog: firn.Catalog) -> None:
    """``firn.compact`` takes ``{"region": "eu"}`` or ``"region=eu"`` for the same
    partition, and the CLI repeated or comma-separated keys for several."""
    orders = make_orders(run, catalog)

    def unmerged() -> dict[str, int]:
        return {p["partition"]: p["unmerged_files"] for p in orders.status()["partitions"]}

    for n, name in enumerate([{"region": "eu"}, "region=eu"]):
        orders.upsert(rows("eu", range(n, 40, 2), n))
        orders.upsert(rows("us", range(n, 40, 3), n))
        before = unmerged()
        summary = firn.compact(orders, name, engine="local")
        assert [(p["partition"], p["outcome"]) for p in summary["plans"]] == [
            ("region=eu", "committed")
        ]
        assert before["region=eu"] > 0
        assert unmerged() == {"region=eu": 0, "region=us": before["region=us"]}

    for argv in (
        ["--partition", "region=eu", "--partition", "region=us"],
        ["--partition", "region=eu,region=us"],
    ):
        orders.upsert(rows("eu", range(5), 9))
        orders.upsert(rows("us", range(5), 9))
        code, doc = run("compact", "orders", "--here", "--engine", "local", *argv)
        assert code == 0, doc
        assert sorted(p["partition"] for p in doc["plans"]) == ["region=eu", "region=us"]
        assert unmerged() == {"region=eu": 0, "region=us": 0}


def read_requests(
    settings: FirnSettings, group: str, expect: int, extra_seconds: float = 2.0
) -> list[tuple[str, Any]]:
    """(key, event) of the plan requests on the topic, from the start: ``expect`` of
    them, then whatever else comes within ``extra_seconds``."""
    topic = Topics.from_settings(settings).plan_requests
    read = messages_on(
        settings, topic, group, expect=expect, extra_seconds=extra_seconds, every=0.2
    )
    return [(m.key().decode(), json.loads(m.value())) for m in read]


def test_compact_publishes_plan_requests(
    run: Run, catalog: firn.Catalog, cli_settings: FirnSettings, unique: str
) -> None:
    orders = make_orders(run, catalog)
    orders.upsert(rows("eu", range(30), 0.0))
    orders.upsert(rows("us", range(30), 0.0))
    orders.upsert(rows("us", range(10), 1.0))
    firn.compact(orders, "region=eu", engine="local")  # nothing left to do there

    code, doc = run("compact", "orders")
    assert code == 0
    assert doc["mode"] == "request"
    assert doc["topic"] == Topics.from_settings(cli_settings).plan_requests
    us_score = next(
        p["score"] for p in orders.status()["partitions"] if p["partition"] == "region=us"
    )
    assert doc["requested"] == [{"partition": "region=us", "max_seq": 3, "score": us_score}]
    assert doc["skipped"] == [{"partition": "region=eu", "reason": "nothing to compact"}]

    ((key, event),) = read_requests(cli_settings, f"cli-{unique}", expect=1)
    validate(event)
    request = PlanRequestEvent.model_validate(event)
    assert key == "orders/region=us"
    assert (request.table, request.table_id, request.partition_key) == (
        "orders",
        orders.table_id,
        "region=us",
    )
    assert (request.kind, request.max_seq) == ("major", 3)
    # Nothing was planned: the services do that.
    assert catalog.conn.execute("SELECT count(*) FROM compaction_plan").fetchone() == (1,)


def serve_request(
    settings: FirnSettings,
    group: str,
    work: Callable[[firn.Table, PlanRequestEvent], None],
    *,
    nth: int = 1,
) -> tuple[threading.Thread, list[BaseException]]:
    """A thread standing in for the services: it waits for the ``nth`` plan request on
    the topic and does ``work`` for it on a catalog of its own."""
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            _, event = read_requests(settings, group, expect=nth, extra_seconds=0)[nth - 1]
            request = PlanRequestEvent.model_validate(event)
            with firn.connect(settings=settings) as catalog:
                work(catalog.table(request.table), request)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, errors


def test_compact_wait_follows_the_work_to_the_end(
    run: Run, catalog: firn.Catalog, cli_settings: FirnSettings, unique: str
) -> None:
    orders = make_orders(run, catalog)
    orders.upsert(rows("eu", range(40), 0.0))
    orders.upsert(rows("eu", range(20, 60), 1.0))
    before = orders.read().sort_by("id")

    def compact(table: firn.Table, request: PlanRequestEvent) -> None:
        firn.compact(table, request.partition_key, request.kind, engine="local")

    thread, errors = serve_request(cli_settings, f"serve-{unique}", compact)
    code, doc = run("compact", "orders", "--wait", "--timeout", "120")
    thread.join(60)
    assert errors == []
    assert code == 0, doc
    assert doc["mode"] == "wait"
    (progress,) = doc["partitions"]
    assert progress["partition"] == "region=eu"
    assert progress["max_merged_seq"] == 2
    assert progress["state"] == "Committed"
    assert orders.read().sort_by("id").equals(before)


def test_compact_wait_reports_a_failed_plan_and_a_timeout(
    run: Run, catalog: firn.Catalog, cli_settings: FirnSettings, unique: str
) -> None:
    orders = make_orders(run, catalog)
    orders.upsert(rows("eu", range(40), 0.0))

    code, doc = run("compact", "orders", "--wait", "--timeout", "1")
    assert code == 1
    assert doc["error"] == "timed out waiting for region=eu"
    assert doc["partitions"][0]["plan_id"] is None

    def fail(table: firn.Table, request: PlanRequestEvent) -> None:
        record = plan_now(table.catalog.conn, table, request.partition_key, request.kind)
        assert isinstance(record, PlanRecord)
        fail_plan(table.catalog.conn, record.plan_id, "disk on fire", by=Actor.DISPATCHER)

    # The timed-out request is still on the topic; serve the next one, made after the
    # command below has noted which plans already existed.
    thread, errors = serve_request(cli_settings, f"fail-{unique}", fail, nth=2)
    code, doc = run("compact", "orders", "--wait", "--timeout", "120")
    thread.join(60)
    assert errors == []
    assert code == 1
    assert "failed: disk on fire" in doc["error"]
    assert doc["partitions"][0]["state"] == "Failed"


def removed_files(catalog: firn.Catalog, table: firn.Table) -> dict[int, list[str]]:
    """The paths of removed data files still in the catalog, by removing snapshot."""
    found: dict[int, list[str]] = {}
    for snapshot, path in catalog.conn.execute(
        "SELECT removed_snapshot, path FROM data_file WHERE table_id = %s "
        "AND removed_snapshot IS NOT NULL ORDER BY path",
        (table.table_id,),
    ).fetchall():
        found.setdefault(snapshot, []).append(path)
    return found


def test_expire_deletes_only_what_no_kept_snapshot_reads(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    table = make_orders(run, catalog)
    table.upsert(rows("eu", range(50), 0.0))  # snapshot 1
    table.upsert(rows("eu", range(25, 75), 1.0))  # 2
    old_view = table.read(2).sort_by("id")
    firn.compact(table, engine="local")  # 3: folds in the change files of 1 and 2
    table.upsert(rows("eu", range(60, 90), 2.0))  # 4
    kept_view = table.read(4).sort_by("id")
    firn.compact(table, engine="local")  # 5: replaces the base files of 3
    table.upsert(rows("eu", range(10), 3.0))  # 6
    current = table.read().sort_by("id")
    removed = removed_files(catalog, table)
    assert sorted(removed) == [3, 5]
    assert table.current_snapshot() == 6
    # Two hours pass for snapshots 1 to 3 only; 4 is the oldest within the retention.
    catalog.conn.execute(
        "UPDATE snapshot SET created_at = created_at - interval '2 hours' "
        "WHERE table_id = %s AND snapshot_id <= 3",
        (table.table_id,),
    )
    table.set_properties({"snapshot.retention": "1h"})
    orphan = "base/region=eu/leftover.parquet"
    table.storage.write_parquet(orphan, rows("eu", range(3), 0.0))
    record_orphans(catalog.conn, table.table_id, [orphan], "a failed attempt")

    code, dry = run("expire", "orders", "--dry-run")
    assert code == 0
    (planned,) = dry["tables"]
    assert (dry["dry_run"], dry["expired_snapshots"], planned["keep_from"]) == (True, 3, 4)
    assert sorted(planned["files"]) == removed[3]
    assert planned["orphans"] == [], "orphan.retention (2 days) has not passed"
    assert all(table.storage.exists(p) for p in removed[3]), "a dry run deletes nothing"
    assert table.read(2).sort_by("id").equals(old_view)

    # As if an earlier run died after deleting one file but before its row went.
    table.storage.delete(removed[3][0])
    code, done = run("expire")
    assert code == 0
    assert done["tables"] == [planned]
    assert (done["dry_run"], done["files"], done["orphans"]) == (False, len(removed[3]), 0)
    sizes = catalog.conn.execute(
        "SELECT coalesce(sum(size_bytes), 0) FROM data_file WHERE path = ANY(%s)", (removed[3],)
    ).fetchone()
    assert sizes == (0,), "the rows of expired files are deleted"
    assert done["bytes"] > 0
    assert not any(table.storage.exists(p) for p in removed[3])
    assert all(table.storage.exists(p) for p in removed[5]), "snapshot 4 still reads them"
    assert table.read().sort_by("id").equals(current)
    assert table.read(4).sort_by("id").equals(kept_view)
    with pytest.raises(firn.SnapshotExpiredError, match=r"snapshot 2 .* expired"):
        table.read(2)
    assert table.storage.exists(orphan)

    code, again = run("expire", "orders")
    assert code == 0
    assert (again["expired_snapshots"], again["files"], again["orphans"]) == (0, 0, 0)

    # Orphans past orphan.retention go; a path the catalog lists is never one of them.
    live = table.files().column("path").to_pylist()[0]
    record_orphans(catalog.conn, table.table_id, [live], "recorded by mistake")
    table.set_properties({"orphan.retention": 0})
    code, dry = run("expire", "orders", "--dry-run")
    assert dry["tables"][0]["orphans"] == [orphan]
    assert table.storage.exists(orphan)
    code, done = run("expire", "orders")
    assert done["tables"][0]["orphans"] == [orphan]
    assert not table.storage.exists(orphan)
    assert table.storage.exists(live)
    left = catalog.conn.execute(
        "SELECT path FROM orphan_file WHERE table_id = %s", (table.table_id,)
    ).fetchall()
    assert left == [(live,)]

    # With no retention only the current snapshot is kept.
    table.set_properties({"snapshot.retention": 0})
    assert main(["expire", "orders"]) == 0
    assert capsys.readouterr().out.startswith(
        f"orders: expired 2 snapshot(s) (oldest kept: 6), {len(removed[5])} data file(s)"
    )
    assert not any(table.storage.exists(p) for p in removed[5])
    assert table.read().sort_by("id").equals(current)
    with pytest.raises(firn.SnapshotExpiredError):
        table.read(4)
    assert run("expire", "nope") == (1, {"error": "no table named 'nope'"})


def test_expire_sweeps_files_unknown_to_the_catalog_with_progress_on_stderr(
    run: Run, catalog: firn.Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    table = make_orders(run, catalog)
    table.upsert(rows("eu", range(50), 0.0))
    live = table.files().column("path").to_pylist()
    stray = "base/region=eu/p9-t9-a1/B-2-0-00000.parquet"  # a killed executor's
    table.storage.write_parquet(stray, rows("eu", range(3), 0.0))
    three_days_ago = time.time() - 3 * 86400
    os.utime(table.storage.full_path(stray), (three_days_ago, three_days_ago))

    assert main(["expire", "orders", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "1 unknown file(s) in storage" in out
    assert f"  {stray}" in out.splitlines()
    assert f"firn: orders: listed {len(live) + 1} file(s), 1 unknown" in err
    assert table.storage.exists(stray), "a dry run deletes nothing"

    code, done = run("expire", "orders")
    assert (code, done["swept"], done["tables"][0]["swept"]) == (0, 1, [stray])
    assert not table.storage.exists(stray)
    assert all(table.storage.exists(p) for p in live)
