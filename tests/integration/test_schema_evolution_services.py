"""Schema changes under load, through the four services as separate processes.

A producer commits continuously (some of its change sets leave out columns added
since the table was made, as a producer still on an earlier version would) while an
administrator changes the schema four times from another handle: add a column with
a default, rename and widen, drop a column and add one back under the same name,
move one. The dispatcher is killed with SIGKILL just before one of the changes and
started again after it. Nobody triggers compaction by hand. Reads equal the
reference model throughout; at the end the table settles, and the base files
written under older versions converge to the latest one as the partitions' own
compaction pays for it (``schema.rewrite-ratio``)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

import firn
from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from tests.integration.cdc_workload import wait_until_settled
from tests.integration.service_processes import running_services
from tests.schema_model import (
    KEY_NAMES,
    SchemaModel,
    apply_block,
    as_named_view,
    change_set,
    schema_of,
    update,
)

SERVICES = ["metrics", "planner", "dispatcher", "committer"]
PROPERTIES = {
    "change.buckets": 2,
    "base.buckets": 2,
    "minor.file-count": 6,
    "major.file-count": 4,
    "task.lease": "6s",
    # Old files may be rewritten at four times the partitions' own compaction rate,
    # so that convergence fits in the test.
    "schema.rewrite-ratio": 4,
}
CHANGES: dict[int, list[tuple[Any, ...]]] = {
    30: [("add", "score", "int64", 7)],
    60: [("rename", "qty", "quantity"), ("widen", "quantity")],
    90: [("drop", "label"), ("add", "label", "string", "fresh")],
    120: [("move", "price")],
}
KILL_BEFORE = 90
COMMITS = 150


def random_ops(rng: random.Random, model: SchemaModel) -> tuple[list[dict[str, Any]], list[str]]:
    """One commit's ops; a third of the commits leave out the columns added since."""
    added = [c.name for c in model.value_columns() if not c.original]
    left_out = added if rng.random() < 0.33 else []
    ops = []
    for _ in range(rng.randint(1, 10)):
        op = "D" if rng.random() < 0.25 else "U"
        row: dict[str, Any] = {"part": rng.choice("abc"), "k": rng.randrange(200), "_op": op}
        for c in model.value_columns():
            if c.name in left_out:
                continue
            if op == "D":
                row[c.name] = None
            elif c.kind in ("int32", "int64"):
                row[c.name] = rng.randrange(-1000, 1000)
            elif c.kind == "float":
                row[c.name] = float(rng.randrange(10**6)) / 8
            else:
                row[c.name] = f"v{rng.randrange(10**4)}"
        ops.append(row)
    return ops, left_out


def old_base(table: firn.Table) -> list[dict[str, Any]]:
    return [
        r
        for r in table.files().to_pylist()
        if r["store"] == "base" and r["schema_id"] != table.schema_id
    ]


def major_plans_since(table: firn.Table, snapshot: int) -> dict[str, int]:
    rows = table.catalog.conn.execute(  # type: ignore[attr-defined]
        "SELECT partition_key, count(*) FROM compaction_plan WHERE table_id = %s "
        "AND state = 'Committed' AND kind <> 'minor' AND planned_snapshot >= %s "
        "GROUP BY partition_key",
        (table.table_id, snapshot),
    ).fetchall()
    return {part: int(n) for part, n in rows}


def test_services_follow_schema_changes_under_load(
    stack_settings: FirnSettings, tmp_path: Path
) -> None:
    settings = stack_settings
    ensure_topics(settings, Topics.from_settings(settings).all())
    model = SchemaModel()
    rng = random.Random(35)
    with (
        firn.connect(settings=settings) as catalog,
        firn.connect(settings=settings) as admin_catalog,
        running_services(settings, tmp_path, SERVICES, FIRN_METRICS_CHECK_INTERVAL="5") as services,
    ):
        table = catalog.create_table(
            "evolving", schema_of(model.columns), list(KEY_NAMES), ["part"], PROPERTIES
        )
        admin = admin_catalog.table("evolving")
        last_change = 0
        for n in range(COMMITS):
            started = time.monotonic()
            if n == KILL_BEFORE:
                services.kill("dispatcher")
            if n in CHANGES:
                update(admin, CHANGES[n])
                apply_block(model, CHANGES[n])
                last_change = admin.current_snapshot()
            if n == KILL_BEFORE:
                services.start("dispatcher")
            ops, left_out = random_ops(rng, model)
            table.commit(change_set(model, ops, left_out))
            model.apply(ops)
            if n % 25 == 24:
                services.assert_running()
                assert as_named_view(table.read()) == model.view(), f"after commit {n}"
            time.sleep(max(0.0, 1 / 8 - (time.monotonic() - started)))
        wait_until_settled(table, services, timeout=300)
        read = table.read()
        assert read.schema.names == [c.name for c in model.columns]
        assert as_named_view(read) == model.view()
        assert table.schema.field("quantity").type == pa.int64()
        assert [v.schema_id for v in table.schemas()] == [0, 1, 2, 3, 4]

        # Convergence: the partitions' compaction pays for rewriting the old base
        # files; small commits keep them compacting until none is left.
        deadline = time.monotonic() + 240
        while old_base(table) and time.monotonic() < deadline:
            ops, left_out = random_ops(rng, model)
            table.commit(change_set(model, ops, left_out))
            model.apply(ops)
            time.sleep(0.2)
        plans = major_plans_since(table, last_change)
        assert not old_base(table), f"not converged after {plans} major plans"
        wait_until_settled(table, services, timeout=300)
        assert as_named_view(table.read()) == model.view()
        print(f"\nconverged: major plans per partition since the last change {plans}")
