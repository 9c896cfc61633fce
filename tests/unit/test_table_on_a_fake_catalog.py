"""``Table`` against a fake ``TableCatalog``: the commit protocol (stage, write,
register, announce; discard on a known failure, keep on an unknown outcome) and the
merged read, with no database. The Postgres catalog's side of the same contract is
tested in tests/integration/test_table_commits.py and test_nothing_leaks.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firn.api.table import Table
from firn.errors import CommitError, CommitStateUnknownError, ConfigError, SnapshotExpiredError
from firn.model.commits import CommitResult, Delivery, StagedFile
from firn.model.files import FileEntry
from firn.model.properties import TableProperties
from firn.model.schema import SchemaVersion, TableSchema
from firn.model.table_catalog import TableCatalog

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
    ]
)


class Acknowledged:
    """A delivery the broker acknowledged."""

    def delivered(self) -> bool:
        return True


class FakeCatalog:
    """A TableCatalog in a few dicts: one table, commits and schema changes only
    (nothing compacts)."""

    def __init__(self) -> None:
        self.staged: set[str] = set()
        self.entries: list[FileEntry] = []
        self.seq = 0
        self.snapshot = 0
        self.versions: list[SchemaVersion] = []
        """Schema versions after the first (the table's own definition is version 0)."""
        self.announced: list[CommitResult] = []
        self.properties: TableProperties | None = None
        self.fail_next: type[CommitError] | None = None
        self.exists = True

    def stage_paths(self, table_id: int, paths: Sequence[str]) -> None:
        self.staged.update(paths)

    def stage_commit(self, table_id: int, paths: Sequence[str]) -> int:
        self.stage_paths(table_id, paths)
        return self.current_schema_id(table_id)

    def unstage_paths(self, table_id: int, paths: Sequence[str]) -> None:
        self.staged.difference_update(paths)

    def busiest_nodes(
        self, table_id: int, partition_keys: Sequence[str]
    ) -> dict[str, tuple[str, int]]:
        runs: dict[str, dict[str, set[int]]] = {}
        for e in self.entries:  # nothing compacts here: every change file is unmerged
            if e.store == "change" and e.partition_key in partition_keys:
                runs.setdefault(e.partition_key, {}).setdefault(str(e.node), set()).add(e.seq)
        return {
            part: max(((node, len(seqs)) for node, seqs in nodes.items()), key=lambda n: n[1])
            for part, nodes in runs.items()
        }

    def register_commit(
        self, table_id: int, staged: Sequence[StagedFile], busiest: bool = False
    ) -> CommitResult:
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure("injected by the test")
        self.seq += 1
        self.snapshot += 1
        for f in staged:
            self.staged.remove(f.path)
            self.entries.append(
                FileEntry(
                    len(self.entries) + 1,
                    f.partition_key,
                    "change",
                    f.file_type,
                    f.node,
                    self.seq,
                    f.path,
                    f.size_bytes,
                    f.record_count,
                    f.min_key,
                    f.max_key,
                    self.snapshot,
                    schema_id=f.schema_id,
                )
            )
        written = sorted({f.partition_key for f in staged})
        runs = self.busiest_nodes(table_id, written) if busiest else None
        return CommitResult(self.seq, self.snapshot, dt.datetime.now(dt.UTC), runs)

    def announce_commit(
        self, table: str, table_id: int, result: CommitResult, staged: Sequence[StagedFile]
    ) -> Delivery | None:
        self.announced.append(result)
        return Acknowledged()

    def save_properties(self, table_id: int, properties: TableProperties) -> bool:
        self.properties = properties
        return self.exists

    def commit_schema(
        self, table_id: int, expected: int, definition: TableSchema, changes: Sequence[str]
    ) -> SchemaVersion:
        if expected != self.current_schema_id(table_id):
            raise CommitError("the schema changed since", retryable=True)
        if not self.versions:
            first = definition.at_version(0)
            self.versions.append(SchemaVersion(0, 0, None, (), first))
        self.snapshot += 1
        version = SchemaVersion(
            definition.schema_id, self.snapshot, None, tuple(changes), definition
        )
        self.versions.append(version)
        return version

    def schema_versions(self, table_id: int) -> list[SchemaVersion]:
        every = {v.schema_id: v.definition.schema for v in self.versions}
        return [
            dataclasses.replace(v, definition=v.definition.with_earlier(every))
            for v in self.versions
        ]

    def schema_id_at(self, table_id: int, snapshot_id: int) -> int:
        return max((v.schema_id for v in self.versions if v.snapshot_id <= snapshot_id), default=0)

    def current_schema_id(self, table_id: int) -> int:
        return self.schema_id_at(table_id, self.snapshot)

    def current_snapshot(self, table_id: int) -> int:
        return self.snapshot

    def check_snapshot(self, table_id: int, snapshot_id: int) -> None:
        if not 0 <= snapshot_id <= self.snapshot:
            raise ConfigError(f"no snapshot {snapshot_id}")
        if snapshot_id == 1 and self.snapshot > 3:
            raise SnapshotExpiredError("snapshot 1 expired")

    def files_at(self, table_id: int, snapshot_id: int) -> list[FileEntry]:
        return [e for e in self.entries if e.added_snapshot <= snapshot_id]

    def merged_seqs_at(self, table_id: int, snapshot_id: int) -> dict[str, int]:
        return {}

    def committed_changes(
        self, table_id: int, after_snapshot: int, upto_snapshot: int
    ) -> list[FileEntry]:
        return [e for e in self.entries if after_snapshot < e.added_snapshot <= upto_snapshot]

    def status(self, table_id: int, name: str, properties: TableProperties) -> dict[str, Any]:
        return {"table": name, "partitions": []}


def new_table(tmp_path: Path, fake: TableCatalog, **properties: Any) -> Table:
    definition = TableSchema.build("orders", SCHEMA, ["region", "id"], ["region"])
    props = TableProperties.parse({"change.buckets": 2, **properties})
    return Table(fake, 1, definition, props, str(tmp_path / "orders-1"))


def rows(table: pa.Table) -> set[tuple[Any, ...]]:
    return set(zip(*(table.column(n).to_pylist() for n in SCHEMA.names), strict=True))


def parquet_files(tmp_path: Path) -> set[Path]:
    return set(tmp_path.rglob("*.parquet"))


def test_a_commit_is_staged_written_registered_and_announced(tmp_path: Path) -> None:
    fake = FakeCatalog()
    table = new_table(tmp_path, fake)
    seq = table.upsert(pa.table({"region": ["eu", "us"], "id": [1, 2], "amount": [1.0, 2.0]}))
    assert seq == 1
    assert fake.staged == set(), "registering clears every staged record"
    assert {e.path for e in fake.entries} == {
        str(p.relative_to(tmp_path / "orders-1")) for p in parquet_files(tmp_path)
    }
    assert [r.seq for r in fake.announced] == [1]
    assert table.last_event_delivered is True


def test_a_commit_checked_against_an_old_schema_version_is_checked_again(
    tmp_path: Path,
) -> None:
    """Staging answers the current schema version: a handle that missed a schema
    change (another process added a column) stages once, finds it, unstages, checks
    the change set against the new version and writes its files under that one."""
    fake = FakeCatalog()
    table = new_table(tmp_path, fake)
    other = new_table(tmp_path, fake)
    with other.update_schema() as update:
        update.add_column("channel", pa.string(), default="web")
    staged: list[list[str]] = []
    stage = fake.stage_commit

    def spied(table_id: int, paths: Sequence[str]) -> int:
        staged.append(list(paths))
        return stage(table_id, paths)

    fake.stage_commit = spied  # type: ignore[method-assign]
    assert table.schema_id == 0
    table.upsert(pa.table({"region": ["eu"], "id": [1], "amount": [1.0]}))
    assert len(staged) == 2, "staged, found version 1, staged again"
    assert fake.staged == set(), "the first paths were unstaged, the second registered"
    assert table.schema_id == 1
    assert {e.schema_id for e in fake.entries} == {1}
    assert table.read().to_pylist() == [{"region": "eu", "id": 1, "amount": 1.0, "channel": "web"}]


def test_a_commit_reports_a_node_whose_runs_reach_the_stall_limit(tmp_path: Path) -> None:
    fake = FakeCatalog()
    table = new_table(tmp_path, fake, **{"change.buckets": 1, "write.stall-runs": 3})
    eu = pa.table({"region": ["eu"], "id": [1], "amount": [1.0]})
    us = pa.table({"region": ["us"], "id": [1], "amount": [1.0]})
    first, second = table.upsert(eu), table.upsert(eu)
    assert not first.stalled
    assert not second.stalled
    assert not table.upsert(us).stalled, "another partition's runs do not count"
    third = table.upsert(eu)
    assert third == 4, "still the seq"
    assert third.stalled
    (stall,) = third.stalls
    assert (stall.partition_key, stall.node, stall.runs, stall.limit) == (
        "region=eu",
        "(1,0)",
        3,
        3,
    )
    assert third.waited == 0.0
    # Nothing compacts here: a commit told to wait gives up after stall_wait seconds.
    waited = table.upsert(eu, stall_wait=0.2)
    assert waited.stalled
    assert waited.waited >= 0.2
    off = new_table(tmp_path / "off", FakeCatalog(), **{"write.stall-runs": 0})
    assert all(not off.upsert(eu).stalled for _ in range(5))


def test_waiting_at_a_stall_limit_not_above_the_minor_trigger_is_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    eu = pa.table({"region": ["eu"], "id": [1], "amount": [1.0]})
    early = new_table(tmp_path, FakeCatalog(), **{"minor.file-count": 5, "write.stall-runs": 5})
    with caplog.at_level(logging.WARNING, logger="firn.api.table"):
        early.upsert(eu)  # not waiting: nothing to say
        assert "minor.file-count" not in caplog.text
        early.upsert(eu, stall_wait=0.01)
        early.upsert(eu, stall_wait=0.01)
    told = [r for r in caplog.records if "is not above minor.file-count (5)" in r.message]
    assert len(told) == 1
    caplog.clear()
    fine = new_table(
        tmp_path / "fine", FakeCatalog(), **{"minor.file-count": 5, "write.stall-runs": 6}
    )
    with caplog.at_level(logging.WARNING, logger="firn.api.table"):
        fine.upsert(eu, stall_wait=0.01)
    assert "minor.file-count" not in caplog.text


def test_a_stalled_commit_looks_again_soon_then_less_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCatalog()
    table = new_table(tmp_path, fake, **{"change.buckets": 1, "write.stall-runs": 2})
    eu = pa.table({"region": ["eu"], "id": [1], "amount": [1.0]})
    table.upsert(eu)
    pauses: list[float] = []
    looks = 0
    stalled_looks = 9
    busiest = fake.busiest_nodes

    def compacted_after_some_looks(
        table_id: int, partition_keys: Sequence[str]
    ) -> dict[str, tuple[str, int]]:
        nonlocal looks
        looks += 1
        return busiest(table_id, partition_keys) if looks <= stalled_looks else {}

    fake.busiest_nodes = compacted_after_some_looks  # type: ignore[method-assign]
    monkeypatch.setattr("firn.api.table.time.sleep", pauses.append)
    committed = table.upsert(eu, stall_wait=60)
    assert not committed.stalled, "compaction caught up before the wait ran out"
    # A compaction cycle takes a few hundred milliseconds: the first looks come quickly,
    # later ones back off to half a second instead of polling the catalog flat out.
    assert len(pauses) == stalled_looks
    assert pauses[0] == pytest.approx(0.02)
    assert all(b == pytest.approx(min(a * 1.5, 0.5)) for a, b in itertools.pairwise(pauses))
    assert pauses[-1] == pytest.approx(0.5)


def test_a_failed_commit_deletes_its_files_and_records(tmp_path: Path) -> None:
    fake = FakeCatalog()
    table = new_table(tmp_path, fake)
    fake.fail_next = CommitError
    with pytest.raises(CommitError, match="commit to 'orders': injected"):
        table.upsert(pa.table({"region": ["eu"], "id": [1], "amount": [1.0]}))
    assert parquet_files(tmp_path) == set()
    assert fake.staged == set()
    assert fake.announced == []


def test_an_unknown_outcome_keeps_files_and_records(tmp_path: Path) -> None:
    fake = FakeCatalog()
    table = new_table(tmp_path, fake)
    fake.fail_next = CommitStateUnknownError
    with pytest.raises(CommitStateUnknownError):
        table.upsert(pa.table({"region": ["eu"], "id": [1], "amount": [1.0]}))
    kept = parquet_files(tmp_path)
    assert kept, "the commit may have landed: its files must stay"
    assert len(fake.staged) == len(kept), "and stay recorded, for orphan cleanup to decide"


def test_reading_an_old_or_unknown_snapshot(tmp_path: Path) -> None:
    fake = FakeCatalog()
    table = new_table(tmp_path, fake)
    for i in range(4):
        table.upsert(pa.table({"region": ["eu"], "id": [i], "amount": [float(i)]}))
    assert table.read(snapshot=2).num_rows == 2
    with pytest.raises(SnapshotExpiredError):
        table.read(snapshot=1)
    with pytest.raises(ConfigError, match="no snapshot 9"):
        table.read(snapshot=9)


def test_properties_of_a_dropped_table_cannot_be_set(tmp_path: Path) -> None:
    fake = FakeCatalog()
    table = new_table(tmp_path, fake)
    assert table.set_properties({"target-file-size": "64MiB"}).target_file_size == 64 * 2**20
    fake.exists = False
    with pytest.raises(ConfigError, match="no longer exists"):
        table.set_properties({"target-file-size": "32MiB"})


OPS = st.lists(
    st.tuples(
        st.sampled_from(["U", "D"]),
        st.sampled_from(["eu", "us"]),
        st.integers(0, 6),
        st.floats(-10, 10, allow_nan=False),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commits=st.lists(OPS, min_size=1, max_size=5))
def test_the_merged_read_equals_a_model_of_the_commits(
    tmp_path_factory: pytest.TempPathFactory, commits: list[list[tuple[str, str, int, float]]]
) -> None:
    table = new_table(tmp_path_factory.mktemp("t"), FakeCatalog())
    model: dict[tuple[str, int], float] = {}
    for ops in commits:
        table.commit(
            pa.table(
                {
                    "region": [o[1] for o in ops],
                    "id": [o[2] for o in ops],
                    "amount": [o[3] if o[0] == "U" else None for o in ops],
                    "_op": [o[0] for o in ops],
                }
            )
        )
        for op, region, key, amount in ops:  # within a commit, the last op per key wins
            if op == "U":
                model[(region, key)] = amount
            else:
                model.pop((region, key), None)
    assert rows(table.read()) == {(r, k, a) for (r, k), a in model.items()}
