"""A streaming CDC producer for the end-to-end and fault tests, with its reference
model, and the waits and checks those tests share.

Each commit mixes upserts and deletes over a small key space in several partitions,
including same-commit delete-then-insert and insert-then-delete of one key, so the
services merge every tricky case while they run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa

import firn
from firn.catalog.compactions import plan_summaries
from firn.errors import CommitStateUnknownError, FirnError
from firn.postgres.connection import Connection

SCHEMA = pa.schema(
    [
        pa.field("day", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
        pa.field("note", pa.string()),
    ]
)
DAYS = ["2026-11-20", "2026-11-21", "2026-11-22"]
# Small thresholds so that a few hundred small commits keep the services busy. The
# lease is short so a killed dispatcher's tasks come back within seconds.
PROPERTIES = {
    "change.buckets": 2,
    "base.buckets": 2,
    "minor.file-count": 6,
    "major.file-count": 4,
    "task.lease": "6s",
}
OPEN_TASK_STATES = ("Init", "Pending", "Executing", "Prepared", "Failed")


class CdcProducer:
    """Commits random change sets to ``table`` and keeps the model in step."""

    def __init__(
        self, table: firn.Table, seed: int, keys: int = 300, days: list[str] = DAYS
    ) -> None:
        self.table = table
        self.days = days
        self.rng = random.Random(seed)
        self.keys = keys
        self.model: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.commits = 0

    def commit_one(self) -> int:
        rows: list[dict[str, Any]] = []
        for _ in range(self.rng.randint(1, 12)):
            day, key = self.rng.choice(self.days), self.rng.randrange(self.keys)
            roll = self.rng.random()
            if roll < 0.25:
                rows.append({"day": day, "id": key, "amount": None, "note": None, "_op": "D"})
            elif roll < 0.32:  # delete then insert in the same commit
                rows.append({"day": day, "id": key, "amount": None, "note": None, "_op": "D"})
                rows.append(self._upsert(day, key))
            elif roll < 0.38:  # insert then delete in the same commit
                rows.append(self._upsert(day, key))
                rows.append({"day": day, "id": key, "amount": None, "note": None, "_op": "D"})
            else:
                rows.append(self._upsert(day, key))
        changes = pa.Table.from_pylist(rows, schema=SCHEMA.append(pa.field("_op", pa.string())))
        seq = self._commit(changes)
        for row in rows:
            key = (row["day"], row["id"])
            if row["_op"] == "D":
                self.model.pop(key, None)
            else:
                self.model[key] = (row["day"], row["id"], row["amount"], row["note"])
        self.commits += 1
        return seq

    def _commit(self, changes: pa.Table, patience: float = 120.0) -> int:
        """Commit as a careful producer does: a commit refused for a transient
        reason (the database restarting) is retried; nothing of it was visible. An
        unknown outcome is raised: the model could not say what the table holds."""
        deadline = time.monotonic() + patience
        while True:
            try:
                return self.table.commit(changes)
            except FirnError as exc:
                if isinstance(exc, CommitStateUnknownError) or not exc.retryable:
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _upsert(self, day: str, key: int) -> dict[str, Any]:
        amount = round(self.rng.uniform(0, 1000), 2)
        return {"day": day, "id": key, "amount": amount, "note": f"c{self.commits}", "_op": "U"}

    def run(
        self, commits: int, per_second: float, between: Callable[[int], None] = lambda _n: None
    ) -> None:
        """``commits`` commits at about ``per_second``; ``between(n)`` after each."""
        for n in range(commits):
            started = time.monotonic()
            self.commit_one()
            between(n)
            time.sleep(max(0.0, 1 / per_second - (time.monotonic() - started)))

    def check(self) -> None:
        got = self.table.read()
        rows = list(zip(*(got.column(c).to_pylist() for c in SCHEMA.names), strict=True))
        assert len(rows) == len(self.model), "row count differs from the model"
        assert {(r[0], r[1]): r for r in rows} == self.model


def open_work(conn: Connection, table_id: int) -> dict[str, int]:
    """Tasks not yet at rest (by state), and open plans."""
    rows = conn.execute(
        "SELECT t.state, count(*) FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %s AND t.state = ANY(%s) GROUP BY t.state",
        (table_id, list(OPEN_TASK_STATES)),
    ).fetchall()
    work = {state: int(n) for state, n in rows}
    (plans,) = conn.execute(
        "SELECT count(*) FROM compaction_plan WHERE table_id = %s "
        "AND state IN ('Planned', 'Executing', 'Committing')",
        (table_id,),
    ).fetchone() or (0,)
    if plans:
        work["open plans"] = int(plans)
    return work


def due_partitions(table: firn.Table) -> dict[str, tuple[str, ...]]:
    """Partitions whose triggers still fire, with the reasons (the status view)."""
    status = table.status()
    return {p["partition"]: tuple(p["reasons"]) for p in status["partitions"] if p["due"]}


def assert_committed_once(conn: Connection, table_id: int) -> None:
    """Every committed plan is in exactly one compaction snapshot, the one its row
    names (plans of several partitions ready at once commit together), and every
    compaction snapshot's summary names the plans committed as it."""
    summaries = conn.execute(
        "SELECT snapshot_id, summary FROM snapshot WHERE table_id = %s AND kind = 'compaction'",
        (table_id,),
    ).fetchall()
    in_snapshots = sorted(
        (int(p["plan_id"]), snapshot)
        for snapshot, summary in summaries
        for p in plan_summaries(summary)
    )
    committed = conn.execute(
        "SELECT plan_id, committed_snapshot FROM compaction_plan WHERE table_id = %s "
        "AND state = 'Committed'",
        (table_id,),
    ).fetchall()
    assert in_snapshots == sorted(committed), "a plan was committed twice, or not as named"


class Watched(Protocol):
    """The services a wait watches (``service_processes.Services``)."""

    def assert_running(self) -> None: ...

    def logs(self, tail: int = 40) -> str: ...


def wait_until_settled(table: firn.Table, services: Watched, timeout: float) -> dict[str, Any]:
    """Wait until no work is open and no partition is due; returns the last view. A
    timeout says what was open or due and what the services last logged."""
    deadline = time.monotonic() + timeout
    view: dict[str, Any] = {}
    while time.monotonic() < deadline:
        services.assert_running()
        view = {
            "open": open_work(table.catalog.conn, table.table_id),
            "due": due_partitions(table),
        }
        if not view["open"] and not view["due"]:
            return view
        time.sleep(1.0)
    raise AssertionError(
        f"not settled after {timeout:.0f}s: {view}\n{failed_tasks(table)}\n{services.logs(tail=80)}"
    )


def failed_tasks(table: firn.Table) -> str:
    """The failed tasks of the table's plans with their errors' first lines: what a
    timeout's message needs (the services' log tails may have scrolled past them)."""
    rows = table.catalog.conn.execute(  # type: ignore[attr-defined]
        "SELECT p.plan_id, p.state, t.task_id, t.attempt, coalesce(t.error, p.error, '') "
        "FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %s AND t.state = 'Failed' ORDER BY t.task_id",
        (table.table_id,),
    ).fetchall()
    return "\n".join(
        f"failed: plan {plan} ({state}) task {task} attempt {attempt}: "
        f"{(error.strip().splitlines() or [''])[0][:300]}"
        for plan, state, task, attempt, error in rows
    )
