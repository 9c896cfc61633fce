"""The tiered policy (issue 15) on a real catalog: random change sets, compactions as
the services plan them (``firn.compact(kind="auto")``), bucket changes and classic
compactions in between, with the merged view checked against the reference model
after every step and at every snapshot afterwards. After each tiered compaction:
exactly the planned inputs are gone (every file outside the plans is still live), a
unit that merged runs has at most ``minor.file-count`` left, and base files of a node
never overlap. Bucket changes make partitions due for re-bucketing in steps."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import firn
from firn.catalog.files import files_at
from firn.engine.planning import draft_now
from firn.model.files import FileEntry
from firn.model.plans import PlanDraft
from tests.changesets import (
    KEY_KINDS,
    KeyKind,
    ReferenceModel,
    as_change_set,
    as_view,
    operations,
    table_schema,
)
from tests.integration.table_checks import check_base_files

_names = itertools.count()
LEVELS = [1, 2, 4]
Step = tuple[str, Any]


@st.composite
def steps(draw: st.DrawFn, kind: KeyKind) -> list[Step]:
    """Mostly commits and tiered compactions; now and then a classic one or a bucket
    change, so units sit at several levels."""
    out: list[Step] = [("commit", draw(operations(kind)))]
    for _ in range(draw(st.integers(8, 24))):
        action = draw(st.sampled_from(["commit"] * 4 + ["auto"] * 3 + ["classic", "buckets"]))
        if action == "commit":
            out.append(("commit", draw(operations(kind))))
        elif action == "auto":
            out.append(("auto", draw(st.sampled_from(["local"] * 5 + ["spark"]))))
        elif action == "classic":
            out.append(("classic", draw(st.sampled_from(["major", "minor", "full"]))))
        else:
            out.append(("buckets", (draw(st.sampled_from(LEVELS)), draw(st.sampled_from(LEVELS)))))
    out.append(("auto", "local"))
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[KeyKind, dict[str, Any], bool, list[Step]]:
    kind = draw(st.sampled_from(KEY_KINDS))
    properties = {
        "change.buckets": draw(st.sampled_from(LEVELS)),
        "base.buckets": draw(st.sampled_from(LEVELS)),
        "target-file-size": draw(st.sampled_from(["2KiB", "64MiB"])),
        "task.max-bytes": draw(st.sampled_from(["3KiB", "512MiB"])),
        "minor.file-count": draw(st.integers(1, 2)),
        "minor.size-ratio": draw(st.sampled_from([0, 0.01, 1])),
        # Mostly high, so units with a base merge runs rather than fold.
        "major.change-ratio": draw(st.sampled_from([0.1, 1, 50, 50])),
        "major.file-count": draw(st.sampled_from([3, 1000, 1000])),
        # Major merges row by row, or column group by column group.
        "compaction.vertical.min-columns": draw(st.sampled_from([0, 1])),
        "compaction.vertical.group-columns": draw(st.sampled_from([1, 2])),
    }
    return kind, properties, draw(st.booleans()), draw(steps(kind))


def table_files(table: firn.Table) -> list[FileEntry]:
    return files_at(table.catalog.conn, table.table_id, table.current_snapshot())


def drafts(table: firn.Table) -> list[PlanDraft]:
    """What the services would plan now: each due partition's tiered draft."""
    due = {p["partition"]: p["due"] for p in table.status()["partitions"] if p["due"]}
    found = [
        draft_now(table.catalog.conn, table, part, kind, scope="due") for part, kind in due.items()
    ]
    return [d for d in found if d is not None]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_tiered_compactions_keep_the_merged_view(
    shared_catalog: firn.Catalog, scenario: tuple[KeyKind, dict[str, Any], bool, list[Step]]
) -> None:
    kind, properties, partitioned, plan = scenario
    schema = table_schema(kind)
    table = shared_catalog.create_table(
        f"tiered_{next(_names)}", schema, ["part", "k"], ["part"] if partitioned else [], properties
    )
    model = ReferenceModel()
    snapshots = []
    for action, arg in plan:
        if action == "commit":
            table.commit(as_change_set(arg, schema))
            model.apply(arg)
        elif action == "buckets":
            table.set_properties({"change.buckets": arg[0], "base.buckets": arg[1]})
        elif action == "classic":
            summary = firn.compact(table, kind=arg, engine="local")
            assert all(p["outcome"] == "committed" for p in summary["plans"]), summary
        else:
            before = {f.file_id for f in table_files(table)}
            planned = drafts(table)
            inputs = {
                f.file_id
                for d in planned
                for t in d.tasks
                for f in (*t.base_files, *t.change_files)
            }
            summary = firn.compact(table, kind="auto", engine=arg)
            assert summary["failed_attempts"] == 0, summary["errors"]
            assert all(p["outcome"] == "committed" for p in summary["plans"]), summary
            assert len(summary["plans"]) == len(planned)
            live = {f.file_id: f for f in table_files(table)}
            # Only a base file a fold kept as it was (firn.engine.vectors) stays live.
            still = inputs & live.keys()
            assert all(live[i].store == "base" for i in still), "a change input is still live"
            if still:
                event("a base input kept as it was")
            if any(f.deletion_vector is not None for f in live.values()):
                event("a base file with a deletion vector")
            assert before - inputs <= live.keys(), "a file outside the plans was rewritten"
            # A move task's file either became a base file as it was (same path) or,
            # when its keys repeat, was merged like any fold.
            to_move = {f.path for d in planned for t in d.tasks if t.move for f in t.change_files}
            if to_move:
                event("move task")
            if to_move & {f.path for f in live.values() if f.store == "base"}:
                event("a file moved into base by metadata")
            trigger = table.properties.minor_file_count
            for d in planned:
                for t in d.tasks:
                    event(f"{t.kind} task")
                    if t.kind != "minor":
                        continue
                    # Counted by what was written together, not by the policy's seqs.
                    written = {
                        f.added_snapshot
                        for f in live.values()
                        if f.partition_key == d.partition_key
                        and f.store == "change"
                        and t.node.is_ancestor_or_self_of(f.node)
                    }
                    assert len(written) <= trigger, f"{t.node} still has too many runs"
            check_base_files(table)
        snapshots.append((table.current_snapshot(), model.view()))
        assert as_view(table.read()) == model.view(), f"after {action} {arg}"
    for snapshot, view in snapshots:
        assert as_view(table.read(snapshot=snapshot)) == view
