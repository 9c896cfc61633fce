"""The order dispatchers claim tasks in, across tables (issue 37): the highest plan
priority first, a plan's score aged by how long it has waited, so a quiet table's
low-scored plan is not passed over for good by a busy table's higher-scored ones;
``firn status`` shows the same order as queue places."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import firn
from firn.catalog.claiming import AGING_SECONDS, claimable_tasks, release_tasks
from firn.engine.planning import plan_now
from firn.model.plans import PlanRecord, PlanSkipped
from firn.settings import FirnSettings

SCHEMA = pa.schema(
    [pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False)]
)


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog:
        yield catalog


def planned(catalog: firn.Catalog, name: str, score: float, waited: float) -> firn.Table:
    """A table with one released plan of ``score``, made ``waited`` seconds ago."""
    table = catalog.create_table(
        name, SCHEMA, ["p", "k"], ["p"], {"change.buckets": 1, "base.buckets": 1}
    )
    table.upsert(pa.table({"p": ["a"], "k": [1]}, schema=SCHEMA))
    plan = plan_now(catalog.conn, table, "p=a", "major")
    assert isinstance(plan, PlanRecord)
    release_tasks(catalog.conn, plan)
    catalog.conn.execute(
        "UPDATE compaction_plan SET score = %s, "
        "waiting_since = now() - make_interval(secs => %s) WHERE plan_id = %s",
        (score, waited, plan.plan_id),
    )
    return table


def test_a_waiting_plan_ages_past_higher_scores(catalog: firn.Catalog) -> None:
    busy = planned(catalog, "busy", score=6.0, waited=0.0)
    quiet = planned(catalog, "quiet", score=0.5, waited=10 * AGING_SECONDS)
    fresh = planned(catalog, "fresh", score=1.0, waited=0.0)
    order = [c.table_id for c in claimable_tasks(catalog.conn, 10)]
    # quiet: 0.5 + 10 = 10.5 > busy: 6 > fresh: 1
    assert order == [quiet.table_id, busy.table_id, fresh.table_id]
    places = {
        t.name: p["open_plan"]["queue"]
        for t in (busy, quiet, fresh)
        for p in t.status()["partitions"]
    }
    assert places == {"quiet": 1, "busy": 2, "fresh": 3}

    catalog.conn.execute("UPDATE compaction_plan SET waiting_since = now()")
    order = [c.table_id for c in claimable_tasks(catalog.conn, 10)]
    assert order == [busy.table_id, fresh.table_id, quiet.table_id]  # by score alone


def test_a_replanned_partition_keeps_its_place_in_the_queue(catalog: firn.Catalog) -> None:
    """More commits while a plan waits replace it with a plan that folds them too;
    the replacement waits from when the first plan did, not from its own making, or
    a partition that keeps receiving commits would go back to the end each time."""
    busy = planned(catalog, "busy", score=6.0, waited=0.0)
    steady = planned(catalog, "steady", score=0.5, waited=10 * AGING_SECONDS)
    steady.upsert(pa.table({"p": ["a"], "k": [2]}, schema=SCHEMA))
    replacement = plan_now(catalog.conn, steady, "p=a", "major")
    assert isinstance(replacement, PlanRecord)
    release_tasks(catalog.conn, replacement)
    states = dict(
        catalog.conn.execute(
            "SELECT plan_id, state FROM compaction_plan WHERE table_id = %s",
            (steady.table_id,),
        ).fetchall()
    )
    assert sorted(states.values()) == ["Planned", "Replaced"]
    catalog.conn.execute(
        "UPDATE compaction_plan SET score = 0.5 WHERE plan_id = %s", (replacement.plan_id,)
    )
    order = [c.table_id for c in claimable_tasks(catalog.conn, 10)]
    assert order == [steady.table_id, busy.table_id], "0.5 + 10 (kept) > 6"


def test_the_planner_service_leaves_a_waiting_plan_to_run(catalog: firn.Catalog) -> None:
    """The services plan with ``replace_waiting=False``: a request for a partition
    whose plan of the same kind still waits leaves that plan as it is (a backlogged
    fleet replanned its queued partitions at every commit and ran few of them); a
    plan of another kind still replaces it, and so does ``firn.compact``'s path."""
    table = planned(catalog, "queued", score=1.0, waited=0.0)
    (first,) = [
        plan_id
        for (plan_id,) in catalog.conn.execute(
            "SELECT plan_id FROM compaction_plan WHERE table_id = %s", (table.table_id,)
        ).fetchall()
    ]
    table.upsert(pa.table({"p": ["a"], "k": [2]}, schema=SCHEMA))

    def states() -> dict[int, str]:
        return dict(
            catalog.conn.execute(
                "SELECT plan_id, state FROM compaction_plan WHERE table_id = %s",
                (table.table_id,),
            ).fetchall()
        )

    kept = plan_now(catalog.conn, table, "p=a", "major", replace_waiting=False)
    assert isinstance(kept, PlanSkipped)
    assert kept.queued, kept
    assert kept.reason.startswith("queued"), kept
    assert states() == {first: "Planned"}

    other_kind = plan_now(catalog.conn, table, "p=a", "full", replace_waiting=False)
    assert isinstance(other_kind, PlanRecord)
    assert states() == {first: "Replaced", other_kind.plan_id: "Planned"}

    table.upsert(pa.table({"p": ["a"], "k": [3]}, schema=SCHEMA))
    replacement = plan_now(catalog.conn, table, "p=a", "full")
    assert isinstance(replacement, PlanRecord)
    assert states()[other_kind.plan_id] == "Replaced"
