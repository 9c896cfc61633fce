"""Data files that do not match the catalog (issue 12, item 5), on the real catalog and
Spark: a change file replaced by valid Parquet with fewer rows, a truncated file, a
damaged page, a catalog row that lies. Reads and merges refuse them with a
``StorageError`` naming the file, a compaction fails its plan at once and commits
nothing, and ``firn verify`` reports each kind of damage."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import firn
from firn.api.compact import Engine
from firn.catalog.claiming import release_tasks
from firn.catalog.files import files_at
from firn.catalog.listing import list_tasks
from firn.cli import main
from firn.engine.execution import run_spark
from firn.engine.planning import plan_now
from firn.engine.spark_session import spark_session
from firn.events.plans import PlanTaskEvent
from firn.events.wire import as_event
from firn.kafka import Topics, ensure_topics, producer
from firn.model.files import FileEntry
from firn.model.plans import PlanRecord
from firn.settings import FirnSettings
from firn_services.dispatcher.handlers import Dispatcher
from tests.integration.test_planner_service import drain

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
    ]
)
# One change file per partition and commit, one base file per partition.
PROPERTIES = {"change.buckets": 1, "base.buckets": 1}


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        yield catalog


def rows(region: str, ids: range, tag: float = 0.0) -> pa.Table:
    n = len(ids)
    return pa.table(
        {"region": [region] * n, "id": list(ids), "amount": [tag + i for i in ids]}, schema=SCHEMA
    )


def orders(catalog: firn.Catalog, name: str) -> tuple[firn.Table, FileEntry]:
    """A table whose partition region=eu has one change file of 120 rows (returned),
    beside a sound partition region=us."""
    table = catalog.create_table(name, SCHEMA, ["region", "id"], ["region"], PROPERTIES)
    table.upsert(rows("eu", range(120)))
    table.upsert(rows("us", range(10)))
    (entry,) = [e for e in live_files(table) if e.partition_key == "region=eu"]
    assert entry.record_count == 120
    return table, entry


def live_files(table: firn.Table) -> list[FileEntry]:
    return files_at(table.catalog.conn, table.table_id, table.current_snapshot())


def replace_with_fewer_rows(table: firn.Table, entry: FileEntry, keep: int = 100) -> str:
    """The file rewritten as valid Parquet holding only its first ``keep`` rows."""
    path = table.storage.full_path(entry.path)
    pq.write_table(pq.read_table(path).slice(0, keep), path)
    return path


def truncate(table: firn.Table, entry: FileEntry) -> tuple[str, int]:
    path = table.storage.full_path(entry.path)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    return path, len(data) // 2


def set_catalog(table: firn.Table, entry: FileEntry, column: str, value: int) -> None:
    """Make the catalog row of ``entry`` say something else about the file."""
    assert column in ("size_bytes", "record_count")
    table.catalog.conn.execute(
        f"UPDATE data_file SET {column} = %s WHERE file_id = %s", (value, entry.file_id)
    )


def failed_moves(catalog: firn.Catalog, task_id: int) -> list[tuple[int, bool]]:
    """(attempt, whether the reason names a damaged table file) of each time the task
    went Executing -> Failed."""
    return [
        (int(attempt), "table file" in reason)
        for attempt, reason in catalog.conn.execute(
            "SELECT attempt, reason FROM state_transition WHERE machine = 'task' "
            "AND entity_id = %s AND from_state = 'Executing' AND to_state = 'Failed' "
            "ORDER BY transition_id",
            (task_id,),
        ).fetchall()
    ]


def test_a_change_file_with_fewer_rows_fails_the_read_naming_it(catalog: firn.Catalog) -> None:
    table, entry = orders(catalog, "fewer_rows")
    path = replace_with_fewer_rows(table, entry)
    with pytest.raises(firn.StorageError, match=re.escape(path)) as raised:
        table.read()
    assert raised.value.retryable is False
    assert isinstance(raised.value, firn.CorruptFileError)


def test_a_record_count_the_rows_do_not_match_fails_the_read(catalog: firn.Catalog) -> None:
    # The size matches (nothing changed on disk), so only counting the rows finds it.
    table, entry = orders(catalog, "count_lies")
    set_catalog(table, entry, "record_count", 121)
    with pytest.raises(firn.CorruptFileError, match=re.escape(entry.path)) as raised:
        table.read()
    assert raised.value.problem == "record-count"
    assert "120 rows read, the catalog says 121" in str(raised.value)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_compacting_a_damaged_partition_fails_the_plan_and_commits_nothing(
    catalog: firn.Catalog, engine: Engine
) -> None:
    table, entry = orders(catalog, f"damaged_{engine}")
    path = replace_with_fewer_rows(table, entry)
    snapshot, files = table.current_snapshot(), table.files()

    summary = firn.compact(table, "region=eu", engine=engine)

    (plan,) = summary["plans"]
    assert plan["outcome"] == "failed"
    assert path in plan["reason"]
    assert "non-retryable" in plan["reason"]
    assert summary["attempts"] == summary["failed_attempts"] == 1, "not retried"
    assert table.current_snapshot() == snapshot, "nothing committed"
    assert table.files().equals(files)
    with pytest.raises(firn.StorageError, match=re.escape(path)):
        table.read()  # still refused, not 100 of 120 rows
    # The reason is on the task and the plan, as `firn tasks` shows it.
    (task,) = list_tasks(catalog.conn, table_id=table.table_id)
    # The failed plan replaces its Failed task (fail_plan), which keeps its error.
    assert (task.state, task.attempt, task.plan_state) == ("Replaced", 1, "Failed")
    assert task.error is not None
    assert path in task.error
    assert failed_moves(catalog, task.task_id) == [(1, True)]
    (plan_error,) = catalog.conn.execute(
        "SELECT error FROM compaction_plan WHERE plan_id = %s", (plan["plan_id"],)
    ).fetchone()
    assert path in plan_error


def test_a_truncated_file_is_a_storage_error_not_arrow_invalid(catalog: firn.Catalog) -> None:
    table, entry = orders(catalog, "truncated")
    path, size = truncate(table, entry)
    with pytest.raises(firn.CorruptFileError, match=re.escape(path)) as raised:
        table.read()
    assert raised.value.problem == "size"
    # Even with a catalog that agrees on the size, the footer is gone: pyarrow's
    # ArrowInvalid surfaces as Firn's error, naming the file.
    set_catalog(table, entry, "size_bytes", size)
    with pytest.raises(firn.CorruptFileError, match=re.escape(path)) as raised:
        table.read()
    assert raised.value.problem == "unreadable"
    assert raised.value.retryable is False

    summary = firn.compact(table, engine="local")
    outcomes = {p["partition"]: (p["outcome"], p["reason"]) for p in summary["plans"]}
    assert outcomes["region=us"][0] == "committed", "the sound partition is compacted"
    assert outcomes["region=eu"][0] == "failed"
    assert path in outcomes["region=eu"][1]


def test_a_damaged_page_behind_a_sound_footer_is_corruption(catalog: firn.Catalog) -> None:
    # pyarrow reports a bad page as a plain OSError, like an I/O timeout; the probe
    # (the bytes read fine but do not decode) tells it is the file's fault.
    table, entry = orders(catalog, "bad_page")
    path = table.storage.full_path(entry.path)
    data = bytearray(Path(path).read_bytes())
    for i in range(4, len(data) // 2):
        data[i] ^= 0x5A
    Path(path).write_bytes(bytes(data))
    with pytest.raises(firn.CorruptFileError, match=re.escape(path)) as raised:
        table.read()
    assert raised.value.problem == "unreadable"
    summary = firn.compact(table, "region=eu", engine="local")
    assert summary["plans"][0]["outcome"] == "failed"
    assert summary["attempts"] == 1


def test_the_dispatcher_fails_the_plan_at_once_on_a_damaged_input(
    settings: FirnSettings, catalog: firn.Catalog, unique: str
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all(), partitions=1)
    table, entry = orders(catalog, "dispatched_damage")
    path = replace_with_fewer_rows(table, entry)
    record = plan_now(table.catalog.conn, table, "region=eu", "major")
    assert isinstance(record, PlanRecord)
    release_tasks(catalog.conn, record)
    (spec,) = record.tasks

    spark = spark_session(settings)
    dispatcher = Dispatcher(
        catalog,
        producer(settings),
        topics,
        lambda t, claims, limits: run_spark(spark, t, claims, limits),
        owner="test",
    )
    event = PlanTaskEvent(
        table=table.name,
        table_id=table.table_id,
        partition_key="region=eu",
        plan_id=record.plan_id,
        task_id=spec.task_id,
        attempt=0,
        input_bytes=spec.input_bytes,
    )
    dispatcher.plan_task(as_event(json.loads(event.to_json())))

    (result,) = drain(settings, topics.task_results, f"results-{unique}", expect=1)
    assert result["outcome"] == "failed"
    assert path in result["error"]
    state = catalog.conn.execute(
        "SELECT t.state, t.attempt, p.state FROM compaction_task t "
        "JOIN compaction_plan p USING (plan_id) WHERE t.task_id = %s",
        (spec.task_id,),
    ).fetchone()
    assert state == ("Replaced", 1, "Failed")
    assert failed_moves(catalog, spec.task_id) == [(1, True)]
    assert dispatcher.sweep(min_age_seconds=0) == [], "nothing left to retry"


# -- firn verify ---------------------------------------------------------------


@pytest.fixture
def cli_env(settings: FirnSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads its settings from the environment, as it does for a user."""
    monkeypatch.setenv("FIRN_DATABASE_URL", settings.database_dsn())
    monkeypatch.setenv("FIRN_DATABASE_SCHEMA", settings.database_schema)
    monkeypatch.setenv("FIRN_KAFKA_BOOTSTRAP", settings.kafka_servers())
    monkeypatch.setenv("FIRN_TOPIC_PREFIX", settings.topic_prefix)
    monkeypatch.setenv("FIRN_HOME", str(tmp_path / "home"))


def verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(["verify", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_firn_verify_reports_each_kind_of_damage(
    catalog: firn.Catalog,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = catalog.create_table("checked", SCHEMA, ["region", "id"], ["region"], PROPERTIES)
    for n in range(3):
        table.upsert(rows("eu", range(n, 60, 3), n))
    firn.compact(table, engine="local")  # a base file
    for n in range(3):
        table.upsert(rows("eu", range(n, 30, 3), 10 + n))
    table.delete(pa.table({"region": ["eu", "eu"], "id": pa.array([1, 2], pa.int64())}))
    firn.compact(table, kind="minor", engine="local")  # change files that store _seq
    for n in range(4):
        table.upsert(rows("eu", range(n, 20, 4), 20 + n))
    files = live_files(table)
    assert {e.file_type for e in files} == {"B", "I", "D"}

    code, clean = verify(capsys, "checked")
    assert code == 0
    assert (clean["ok"], clean["problems"], clean["files_checked"]) == (True, [], len(files))
    assert clean["bytes_checked"] == sum(e.size_bytes for e in files)
    code, deep = verify(capsys, "checked", "--deep")
    assert (code, deep["ok"], deep["deep"]) == (0, True, True)

    missing, truncated, counted, sized = [e for e in files if e.file_type == "I"][-4:]
    Path(table.storage.full_path(missing.path)).unlink()
    truncate(table, truncated)
    set_catalog(table, counted, "record_count", counted.record_count + 1)
    set_catalog(table, sized, "size_bytes", sized.size_bytes + 7)

    code, report = verify(capsys, "checked")
    assert code == 1
    assert report["ok"] is False
    assert "4 of" in report["error"]
    found = {(p["file_id"], p["kind"]) for p in report["problems"]}
    assert found == {
        (missing.file_id, "missing"),
        (truncated.file_id, "size"),
        (truncated.file_id, "unreadable"),
        (counted.file_id, "record-count"),
        (sized.file_id, "size"),
    }
    assert all(table.storage.full_path("") in p["path"] for p in report["problems"])

    # Text for people: one line per problem naming the file, a summary, exit 1;
    # progress on stderr once the check takes long enough (here: at once).
    monkeypatch.setattr("firn.commands.verify.PROGRESS_SECONDS", 0.0)
    assert main(["verify", "checked"]) == 1
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 6
    assert lines[0].startswith(table.storage.full_path(""))
    assert f"{len(files)} file(s) checked" in lines[-1]
    assert "5 problem(s)" in lines[-1]
    assert f"{len(files)}/{len(files)} files" in err
    assert "firn: error: 5 problem(s) in 4 of" in err


def test_firn_verify_finds_a_file_lacking_a_column(
    catalog: firn.Catalog, cli_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table, entry = orders(catalog, "lacking")
    path = table.storage.full_path(entry.path)
    pq.write_table(pq.read_table(path).drop_columns(["_ord"]), path)
    set_catalog(table, entry, "size_bytes", Path(path).stat().st_size)
    code, report = verify(capsys, "lacking")
    assert code == 1
    ((kind, detail),) = [(p["kind"], p["detail"]) for p in report["problems"]]
    assert (kind, detail) == ("schema", "lacks the column(s) _ord")
    with pytest.raises(firn.CorruptFileError, match=re.escape(path)):
        table.read()
    code, missing = verify(capsys, "nope")
    assert code == 1
    assert "nope" in missing["error"]
