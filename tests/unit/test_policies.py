"""The policy seam: the registry chooses one small class per kind and scope, the
off-peak wrapper reads the clock for the policy it wraps, and the partition trigger
and a unit's fold weigh changes by the same rules."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from firn.engine import policies
from firn.engine.policies import (
    REGISTRY,
    BinPack,
    FoldAll,
    MergeRuns,
    OffPeak,
    PartitionFiles,
    Rebucket,
    TieredRuns,
    policy_for,
)
from firn.errors import ConfigError
from firn.model.plans import PlanDraft
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn.model.tasks import Kind
from firn.model.tiering import Run, Unit, fold_reasons
from firn.model.triggers import PartitionMetrics, major_reasons
from firn.model.windows import Window

TABLE = TableSchema.build("t", pa.schema([pa.field("id", pa.int64(), False)]), ["id"])
PROPS = TableProperties()
NIGHT = TableProperties.parse({"compaction.major-window": "01:00-05:00"})


def test_each_kind_and_scope_has_its_policy() -> None:
    chosen = {
        (scope, kind): type(policy_for(kind, PROPS, keyed=True, scope=scope))
        for scope in ("all", "due")
        for kind in (Kind.MAJOR, Kind.MINOR, Kind.FULL)
    }
    assert chosen == {
        ("all", Kind.MAJOR): FoldAll,
        ("all", Kind.MINOR): MergeRuns,
        ("all", Kind.FULL): FoldAll,
        ("due", Kind.MAJOR): TieredRuns,
        ("due", Kind.MINOR): TieredRuns,
        ("due", Kind.FULL): Rebucket,
    }
    assert set(REGISTRY) == set(chosen)
    assert policy_for("full", PROPS, keyed=True) == FoldAll(full=True)
    assert policy_for("minor", PROPS, keyed=True, scope="due") == TieredRuns(Kind.MINOR)


def test_a_table_without_a_key_is_bin_packed_whatever_the_kind() -> None:
    for scope in ("all", "due"):
        assert policy_for("major", PROPS, keyed=False, scope=scope) == BinPack()
        assert policy_for("minor", PROPS, keyed=False, scope=scope) == BinPack()
        assert policy_for("full", PROPS, keyed=False, scope=scope) == BinPack(everything=True)


def test_a_kind_the_table_cannot_have_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="unknown compaction kind 'huge'"):
        policy_for("huge", PROPS, keyed=True)
    with pytest.raises(ConfigError, match="bin-pack is for tables without a primary key"):
        policy_for(Kind.BIN_PACK, PROPS, keyed=True)


def test_only_the_services_policy_is_held_to_the_window() -> None:
    due = policy_for("major", NIGHT, keyed=True, scope="due")
    assert due == OffPeak(TieredRuns(Kind.MAJOR), Window.parse("01:00-05:00"))
    assert policy_for("major", NIGHT, keyed=True, scope="all") == FoldAll()


@dataclass
class Recorder:
    """A policy that remembers what it was handed."""

    seen: list[PartitionFiles] = field(default_factory=list)

    def plan(self, partition: PartitionFiles) -> PlanDraft | None:
        self.seen.append(partition)
        return None


def test_the_off_peak_wrapper_marks_the_partition_outside_its_window_only() -> None:
    inner = Recorder()
    wrapped = OffPeak(inner, Window.parse("01:00-05:00 Europe/Paris"))
    day = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    for hour in (1, 12, 23):  # Paris is UTC+1 in November: 02:00 is inside, 00:00 not
        wrapped.plan(PartitionFiles(TABLE, PROPS, "", 0, (), now=day.replace(hour=hour)))
    assert [p.off_peak for p in inner.seen] == [False, True, True]
    assert all(p.now is not None for p in inner.seen), "the instant is passed on unchanged"


def test_a_new_policy_needs_only_its_class_and_a_registry_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder()
    monkeypatch.setitem(REGISTRY, ("all", Kind.MAJOR), recorder)
    assert policies.plan(TABLE, PROPS, "p=1", 3, [], "major") is None
    assert [(p.partition_key, p.max_merged_seq) for p in recorder.seen] == [("p=1", 3)]


sizes = st.integers(0, 1 << 30)


@given(inserts=sizes, deletes=sizes, base=sizes, runs=st.integers(1, 12))
def test_the_partition_trigger_and_a_whole_partition_unit_agree_on_the_change_rules(
    inserts: int, deletes: int, base: int, runs: int
) -> None:
    """A unit covering every node of a partition, holding all its runs, with the
    partition's base: its fold reasons are the trigger's change reasons."""
    p = TableProperties().model_copy(
        update={"major_change_bytes_lowest": 1 << 20, "major_interval_max": 10**9}
    )
    unit_runs = (Run(runs + 1, inserts, deletes), *(Run(s, 0, 0) for s in range(runs, 1, -1)))
    unit = Unit(unit_runs, base_bytes=base, nodes=p.base_buckets)
    metrics = PartitionMetrics(
        unmerged_insert_bytes=inserts,
        unmerged_delete_bytes=deletes,
        unmerged_files=runs,
        base_bytes=base,
        base_files=1,
        small_files=runs,
        max_runs_per_node=runs,
        seconds_since_major=0.0,
    )
    assert fold_reasons(unit, p) == major_reasons(metrics, p)
