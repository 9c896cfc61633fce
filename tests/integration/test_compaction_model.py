"""The merged view never changes across compactions: the reference model, checked
after every commit and every compaction (major, full, minor; on Spark or in
process), with files at several tree levels."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import firn
from tests.changesets import (
    KEY_KINDS,
    LEVELS,
    KeyKind,
    ReferenceModel,
    Step,
    as_change_set,
    as_view,
    life_steps,
    table_schema,
)
from tests.integration.table_checks import check_base_files

_names = itertools.count()


@st.composite
def steps(draw: st.DrawFn, kind: KeyKind) -> list[Step]:
    """A table's life compacted locally or on Spark, ending with a major compaction."""
    life = draw(life_steps(kind, engines=("local", "spark"), most=9))
    return [*life, ("compact", ("major", "local"))]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[KeyKind, dict[str, Any], bool, list[Step]]:
    kind = draw(st.sampled_from(KEY_KINDS))
    properties = {
        "change.buckets": draw(st.sampled_from(LEVELS)),
        "base.buckets": draw(st.sampled_from(LEVELS)),
        # Small files and small tasks, so files are cut and nodes split by key range.
        "target-file-size": draw(st.sampled_from(["2KiB", "6KiB", "64MiB"])),
        "task.max-bytes": draw(st.sampled_from(["3KiB", "512MiB"])),
        # Small partitions of a commit at their root node: never, some, always.
        "change.split-rows": draw(st.sampled_from([0, 3, 100_000])),
        # Small partitions' base at the root: never, until they grow, always.
        "base.split-bytes": draw(st.sampled_from([0, "4KiB", "1GiB"])),
        # Major merges row by row, or key first and then one or two value columns
        # at a time (firn.engine.vertical).
        "compaction.vertical.min-columns": draw(st.sampled_from([0, 1])),
        "compaction.vertical.group-columns": draw(st.sampled_from([1, 2])),
    }
    return kind, properties, draw(st.booleans()), draw(steps(kind))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_read_equals_the_model_across_compactions(
    shared_catalog: firn.Catalog, scenario: tuple[KeyKind, dict[str, Any], bool, list[Step]]
) -> None:
    kind, properties, partitioned, plan = scenario
    schema = table_schema(kind)
    table = shared_catalog.create_table(
        f"compacted_{next(_names)}",
        schema,
        ["part", "k"],
        ["part"] if partitioned else [],
        properties,
    )
    model = ReferenceModel()
    snapshots = []
    for action, arg in plan:
        if action == "commit":
            table.commit(as_change_set(arg, schema))
            model.apply(arg)
        elif action == "buckets":
            table.set_properties({"change.buckets": arg[0], "base.buckets": arg[1]})
        else:
            compaction_kind, engine = arg
            before = Counter(
                (r["partition"], r["node"])
                for r in table.files().to_pylist()
                if r["store"] == "change"
            )
            compacted_after = table.current_snapshot()
            summary = firn.compact(table, kind=compaction_kind, engine=engine)
            assert summary["failed_attempts"] == 0, summary["errors"]
            assert all(p["outcome"] == "committed" for p in summary["plans"]), summary
            changes = [r for r in table.files().to_pylist() if r["store"] == "change"]
            if compaction_kind == "minor":
                # Nodes that had several change files now have only the minor's
                # outputs (added after the snapshot it started from: a table's plans
                # commit together, in one snapshot); a node with one file keeps it.
                for r in changes:
                    merged_here = before[(r["partition"], r["node"])] > 1
                    assert (r["added_snapshot"] > compacted_after) == merged_here
            else:
                # Nothing commits concurrently here: no change file is left unmerged.
                assert not changes
            check_base_files(table)
        snapshots.append((table.current_snapshot(), model.view()))
        assert as_view(table.read()) == model.view(), f"after {action} {arg}"
    for snapshot, view in snapshots:
        assert as_view(table.read(snapshot=snapshot)) == view
