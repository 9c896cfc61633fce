"""Schema evolution against the reference model (``tests/schema_model.py``): random
lives of commits (some from producers still on an earlier version), schema changes
of every kind (add with and without defaults, drop, rename, widen, move, drop then
add of the same name), compactions of every kind, and a compaction planned under
one version and committed after the next. Every read at every snapshot equals the
model applied with that snapshot's schema."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import firn
from firn.api.catalog import postgres_catalog_of
from firn.catalog.claiming import claim_tasks, release_tasks
from firn.catalog.compactions import commit_plan
from firn.catalog.results import record_results
from firn.engine.execution import run_local
from firn.engine.kernel import KernelLimits
from firn.engine.planning import plan_now
from firn.model.plans import PlanRecord
from tests.schema_model import (
    KEY_NAMES,
    SchemaModel,
    apply_block,
    as_named_view,
    change_set,
    operations,
    schema_changes,
    schema_of,
    update,
)

_names = itertools.count()

Step = tuple[str, Any]


@st.composite
def lives(draw: st.DrawFn) -> list[Step]:
    """Steps drawn against a model that follows them, so each is valid when taken."""
    model = SchemaModel()
    steps: list[Step] = []
    for n in range(draw(st.integers(3, 12))):
        action = (
            "commit"
            if n == 0
            else draw(st.sampled_from(["commit", "commit", "schema", "compact", "planned-across"]))
        )
        if action == "commit":
            ops, left_out = draw(operations(model))
            steps.append(("commit", (ops, left_out)))
            model.apply(ops)
        elif action in ("schema", "planned-across"):
            block = draw(schema_changes(model))
            if not block:
                continue
            steps.append((action, block))
            apply_block(model, block)
        else:
            steps.append(("compact", draw(st.sampled_from(["major", "full", "minor", "auto"]))))
    steps.append(("compact", "full"))
    return steps


def compact_across(table: firn.Table, block: list[tuple[Any, ...]]) -> None:
    """Plan a major of every partition under the current version, apply ``block``,
    then run and commit the plans: they were made under the version before."""
    catalog = postgres_catalog_of(table)
    conn = catalog.conn
    partitions = [p["partition"] for p in table.status()["partitions"]]
    plans = []
    for part in partitions:
        record = plan_now(conn, table, part, "major")
        if isinstance(record, PlanRecord):
            release_tasks(conn, record)
            plans.append(record)
    update(table, block)
    for record in plans:
        claims = claim_tasks(conn, [t.task_id for t in record.tasks], "test", 60)
        results = run_local(table.definition, claims, KernelLimits())
        assert all(r.ok for r in results), [r.error for r in results]
        record_results(conn, results, 5)
        outcome = commit_plan(conn, record.plan_id)
        assert outcome.outcome == "committed", outcome


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(life=lives(), partitioned=st.booleans(), vertical=st.booleans())
def test_every_snapshot_reads_as_the_model_with_its_schema(
    shared_catalog: firn.Catalog, life: list[Step], partitioned: bool, vertical: bool
) -> None:
    model = SchemaModel()
    table = shared_catalog.create_table(
        f"evolving_{next(_names)}",
        schema_of(model.columns),
        list(KEY_NAMES),
        ["part"] if partitioned else [],
        {
            "change.buckets": 2,
            "base.buckets": 2,
            "target-file-size": "4KiB",
            # Major merges column group by column group, two value columns at a time.
            "compaction.vertical.min-columns": 1 if vertical else 0,
            "compaction.vertical.group-columns": 2,
        },
    )
    snapshots: list[tuple[int, list[str], dict[Any, Any]]] = []
    for action, arg in life:
        if action == "commit":
            ops, left_out = arg
            table.commit(change_set(model, ops, left_out))
            model.apply(ops)
        elif action == "schema":
            update(table, arg)
            apply_block(model, arg)
        elif action == "planned-across":
            compact_across(table, arg)
            apply_block(model, arg)
        else:
            summary = firn.compact(table, kind=arg, engine="local")
            assert summary["failed_attempts"] == 0, summary["errors"]
        names = [c.name for c in model.columns]
        assert table.schema.names == names, f"after {action} {arg}"
        read = table.read()
        assert read.schema.names == names
        assert as_named_view(read) == model.view(), f"after {action} {arg}"
        snapshots.append((table.current_snapshot(), names, model.view()))
    for snapshot, names, view in snapshots:
        read = table.read(snapshot=snapshot)
        assert read.schema.names == names, snapshot
        assert as_named_view(read) == view, snapshot
    # Compaction writes the current version: after the last full, every base file is.
    versions = {r["schema_id"] for r in table.files().to_pylist()}
    assert versions <= {table.schema_id}, versions
