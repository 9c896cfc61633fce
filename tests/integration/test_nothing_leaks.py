"""Nothing leaks (issue 12, item 7), on the real catalog and storage: staged files of
failed commits, of commits with an unknown outcome, files of killed attempts and any
file the catalog does not know are deleted; nothing the catalog may still need is."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import firn
from firn.catalog.claiming import claim_task, release_tasks
from firn.catalog.commits import register_commit, stage_paths
from firn.catalog.expiry import ExpiryReport, expire
from firn.catalog.leasing import expire_leases
from firn.catalog.plans import fail_plan
from firn.engine.planning import plan_now
from firn.engine.staging import file_name, split_changes, write_group
from firn.errors import CommitError, CommitStateUnknownError
from firn.model.changes import OP, validate_changes
from firn.model.commits import StagedFile
from firn.model.plans import PlanRecord
from firn.model.states import Actor
from firn.settings import FirnSettings
from tests import waiting
from tests.integration.commit_fault_proxy import Fault, commit_fault_proxy

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
_names = itertools.count()
DEADLINE = 60.0


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog:
        yield catalog


def rows(ids: range) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"v{i}" for i in ids]})


def new_table(catalog: firn.Catalog, **properties: object) -> firn.Table:
    props = {"change.buckets": 2, "base.buckets": 1, **properties}
    return catalog.create_table(f"leaks_{next(_names)}", SCHEMA, ["id"], [], props)


def stored(table: firn.Table) -> set[str]:
    return {f.path for f in table.storage.walk()}


def recorded(table: firn.Table) -> set[str]:
    found = table.catalog.conn.execute(
        "SELECT path FROM orphan_file WHERE table_id = %s", (table.table_id,)
    ).fetchall()
    return {p for (p,) in found}


def registered(table: firn.Table) -> set[str]:
    found = table.catalog.conn.execute(
        "SELECT path FROM data_file WHERE table_id = %s", (table.table_id,)
    ).fetchall()
    return {p for (p,) in found}


def ids(table: firn.Table) -> list[int]:
    return sorted(table.read().column("id").to_pylist())


def eventually(check: Callable[[], bool], what: str) -> None:
    waiting.eventually(check, timeout=DEADLINE, what=what)


def past_retention(table: firn.Table, paths: set[str]) -> Callable[[], bool]:
    """Whether every file of ``paths`` and its record are older than the table's
    orphan.retention on the database's clock (the one expiry uses)."""

    def check() -> bool:
        row = table.catalog.conn.execute(
            "SELECT now() - make_interval(secs => %s), "
            "(SELECT max(recorded_at) FROM orphan_file WHERE table_id = %s)",
            (table.properties.orphan_retention, table.table_id),
        ).fetchone()
        assert row is not None
        cutoff, newest_record = row
        times = [f.modified for f in table.storage.walk() if f.path in paths]
        times.append(newest_record)
        return all(t < cutoff for t in times if t is not None)

    return check


def expire_until_gone(table: firn.Table, paths: set[str]) -> list[ExpiryReport]:
    reports: list[ExpiryReport] = []

    def gone() -> bool:
        reports.append(expire(table.catalog.conn, table.name))
        return not paths & stored(table)

    eventually(gone, f"expiry deletes {sorted(paths)}")
    return reports


def refuse_file_registration(table: firn.Table, *, at_commit: bool) -> None:
    """Make Postgres reject the next commit: on the INSERT of its files, or only when
    COMMIT runs the deferred check (so the error answers COMMIT itself)."""
    conn = table.catalog.conn
    conn.execute(
        "CREATE FUNCTION refuse_files() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'no new files today'; END $$"
    )
    timing = "DEFERRABLE INITIALLY DEFERRED" if at_commit else "NOT DEFERRABLE"
    conn.execute(
        f"CREATE CONSTRAINT TRIGGER refuse_files AFTER INSERT ON data_file {timing} "
        "FOR EACH ROW EXECUTE FUNCTION refuse_files()"
    )


@pytest.mark.parametrize("at_commit", [False, True], ids=["at-insert", "at-commit"])
def test_a_commit_whose_transaction_fails_leaves_no_file(
    catalog: firn.Catalog, at_commit: bool
) -> None:
    table = new_table(catalog)
    table.upsert(rows(range(3)))
    before = stored(table)
    refuse_file_registration(table, at_commit=at_commit)
    with pytest.raises(CommitError, match="no new files today") as failure:
        table.upsert(rows(range(10, 20)))
    assert not isinstance(failure.value, CommitStateUnknownError), "Postgres said: rolled back"
    assert stored(table) == before
    assert recorded(table) == set()
    assert ids(table) == [0, 1, 2]


def proxied_url(settings: FirnSettings, port: int) -> str:
    assert settings.database_url is not None
    params = conninfo_to_dict(settings.database_url.get_secret_value())
    params.update(host="127.0.0.1", port=str(port), sslmode="disable", gssencmode="disable")
    return make_conninfo(**params)  # type: ignore[arg-type]


def upstream(settings: FirnSettings) -> tuple[str, int]:
    assert settings.database_url is not None
    params = conninfo_to_dict(settings.database_url.get_secret_value())
    return str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)


@pytest.mark.parametrize("fault", ["lost", "landed"])
def test_an_unknown_commit_outcome_keeps_the_files_and_cleanup_decides_later(
    catalog: firn.Catalog, settings: FirnSettings, tmp_path: Path, fault: Fault
) -> None:
    table = new_table(catalog, **{"orphan.retention": "1s"})
    table.upsert(rows(range(3)))
    before = stored(table)
    with (
        commit_fault_proxy(upstream(settings)) as proxy,
        firn.connect(proxied_url(settings, proxy.port), settings=settings) as remote,
    ):
        producer = remote.table(table.name)
        proxy.arm(fault, after=b"firn_register_commit")
        with pytest.raises(CommitStateUnknownError, match="may or may not have landed"):
            producer.upsert(rows(range(10, 15)))
        assert proxy.tripped.is_set()
    staged = stored(table) - before
    assert staged, "the staged files are kept: the commit may have landed"
    if fault == "lost":
        assert recorded(table) == staged, "recorded: no commit references them"
        assert ids(table) == [0, 1, 2]
        reports = expire_until_gone(table, staged)
        assert set(reports[-1].tables[0].orphans) == staged
        assert recorded(table) == set()
    else:
        assert staged <= registered(table)
        assert recorded(table) == set(), "the commit that landed removed the records"
        eventually(past_retention(table, staged), "the files are past orphan.retention")
        report = expire(catalog.conn, table.name)
        assert (report.orphans, report.swept) == (0, 0)
        assert staged <= stored(table)
    expected = [0, 1, 2] if fault == "lost" else [0, 1, 2, 10, 11, 12, 13, 14]
    assert ids(table) == expected


def plan(table: firn.Table) -> PlanRecord:
    record = plan_now(table.catalog.conn, table, "", "major")
    assert isinstance(record, PlanRecord)
    release_tasks(table.catalog.conn, record)
    return record


def write_partial(table: firn.Table, directory: str) -> str:
    """What an executor killed mid-write leaves: a Parquet file without its footer."""
    path = f"{directory}/B-1-0-00000.parquet"
    with table.storage.open_output(path) as out:
        out.write(b"PAR1" + os.urandom(1000))
    return path


def test_files_of_killed_attempts_go_once_past_the_retention_a_running_ones_stay(
    catalog: firn.Catalog,
) -> None:
    table = new_table(catalog, **{"orphan.retention": "1s"})
    table.upsert(rows(range(10)))
    table.upsert(rows(range(5, 15)))
    record = plan(table)
    conn = catalog.conn
    task_id = record.tasks[0].task_id
    claim = claim_task(conn, task_id, "doomed", 60)
    assert claim is not None
    running = write_partial(table, claim[0].output_dir(claim[1]))
    eventually(past_retention(table, {running}), "the attempt's file is past the retention")
    report = expire(conn, table.name)
    assert (report.orphans, report.swept) == (0, 0)
    assert table.storage.exists(running), "the attempt is still running"

    # Its executor dies: once the lease runs out the attempt's directory is recorded.
    conn.execute(
        "UPDATE compaction_task SET lease_expires = now() - interval '1 s' WHERE task_id = %s",
        (task_id,),
    )
    assert expire_leases(conn) == [task_id]
    killed = f"{claim[0].output_dir(claim[1])}/"
    assert recorded(table) == {killed}
    expire_until_gone(table, {running})  # by its record or the sweep: whichever is due
    eventually(
        lambda: not expire(conn, table.name).orphans and recorded(table) == set(),
        "the record of the killed attempt's directory expires",
    )
    assert not table.storage.exists(killed)

    # The next attempt dies too, and its plan is given up before anyone notices: no
    # record names its file, the storage sweep finds it.
    again = claim_task(conn, task_id, "doomed too", 60)
    assert again is not None
    unrecorded = write_partial(table, again[0].output_dir(again[1]))
    assert fail_plan(conn, record.plan_id, "operator gave up", by=Actor.DISPATCHER)
    assert recorded(table) == set()
    reports = expire_until_gone(table, {unrecorded})
    assert unrecorded in reports[-1].tables[0].swept
    assert ids(table) == list(range(15))


def half_commit(table: firn.Table, keys: range) -> list[StagedFile]:
    """The first two steps of ``Table.commit``: staged and written, not committed."""
    changes = validate_changes(
        table.definition, rows(keys).append_column(OP, pa.array(["U"] * len(keys)))
    )
    groups = split_changes(table.definition, table.properties.change_buckets, changes)
    paths = [file_name(group) for group in groups]
    stage_paths(table.catalog.conn, table.table_id, paths)
    return [
        write_group(table.definition, table.storage, group, path)
        for group, path in zip(groups, paths, strict=True)
    ]


def age(table: firn.Table, days: float) -> None:
    """Date every file back, as if written ``days`` ago (local storage)."""
    then = time.time() - days * 86400
    for f in table.storage.walk():
        os.utime(table.storage.full_path(f.path), (then, then))


def test_the_sweep_deletes_only_unknown_files_and_a_dry_run_nothing(
    catalog: firn.Catalog,
) -> None:
    table = new_table(catalog, **{"snapshot.retention": "1h"})
    table.upsert(rows(range(10)))
    table.upsert(rows(range(5, 15)))
    firn.compact(table, engine="local")  # removed files stay for snapshot.retention
    table.upsert(rows(range(20, 25)))
    staged = half_commit(table, range(30, 32))  # a producer yet to commit
    in_progress = {f.path for f in staged}
    stray = "base/p999-t999-a1/B-1-0-00000.parquet"
    table.storage.write_parquet(stray, rows(range(1)))
    age(table, days=3)  # past orphan.retention (2 days), files and all
    known = stored(table) - {stray}
    assert registered(table) | in_progress == known

    dry = expire(catalog.conn, table.name, dry_run=True)
    assert dry.tables[0].swept == (stray,)
    assert stored(table) == known | {stray}, "a dry run deletes nothing"

    done = expire(catalog.conn, table.name)
    assert done.tables[0].swept == (stray,)
    assert done.tables[0].swept_bytes > 0
    assert stored(table) == known
    assert ids(table) == [*range(15), *range(20, 25)]
    # The producer's commit lands after all: its file is there to register.
    with catalog.conn.transaction():
        register_commit(catalog.conn, table.table_id, staged)
    assert ids(table) == [*range(15), *range(20, 25), 30, 31]


def test_a_commit_slower_than_orphan_retention_fails_instead_of_losing_files(
    catalog: firn.Catalog,
) -> None:
    table = new_table(catalog, **{"orphan.retention": "1s"})
    staged = half_commit(table, range(3))
    paths = [f.path for f in staged]
    eventually(past_retention(table, set(paths)), "the staged files are past the retention")
    expire_until_gone(table, set(paths))
    with (
        pytest.raises(CommitError, match="orphan cleanup claimed them"),
        catalog.conn.transaction(),
    ):
        register_commit(catalog.conn, table.table_id, staged)
    assert ids(table) == []
    assert table.current_snapshot() == 0


def test_records_claimed_by_an_expiry_that_died_are_finished_and_fence_the_commit(
    catalog: firn.Catalog,
) -> None:
    table = new_table(catalog)  # orphan.retention: 2 days, far off
    staged = half_commit(table, range(3))
    paths = {f.path for f in staged}
    # An expiry run claimed the records, then died before deleting the files.
    catalog.conn.execute(
        "UPDATE orphan_file SET deleted_at = now() WHERE table_id = %s", (table.table_id,)
    )
    with (
        pytest.raises(CommitError, match="orphan cleanup claimed them"),
        catalog.conn.transaction(),
    ):
        register_commit(catalog.conn, table.table_id, staged)
    assert paths <= stored(table)
    report = expire(catalog.conn, table.name)
    assert set(report.tables[0].orphans) == paths
    assert not paths & stored(table)
    assert recorded(table) == set()
