"""A task's way to an executor: released once announced (Init -> Pending), announced
again while it waits, and claimed (Pending -> Executing) with a new attempt and a
lease (design §6, design §9).

Announcing is at-least-once: a task's plan-task event may be lost, or the planner may
die between storing a plan and releasing its tasks, so the waiting tasks are listed
for a re-announcement. Duplicate events are harmless, because only one claim of a
Pending task can win (the compare-and-set of ``firn.catalog.transitions``, whose
docstring gives the lock order: a claim locks the plan before the task). The lease a
claim takes is kept alive and taken back by ``firn.catalog.leasing``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from firn.catalog.plans import OPEN_PLAN_STATES
from firn.catalog.transitions import lock_plans_of, move_plans, move_task
from firn.events.plans import PlanTaskEvent
from firn.model.permits import Candidate
from firn.model.plans import PlanRecord
from firn.model.properties import TableProperties
from firn.model.states import TASK, Actor, PlanState, TaskState
from firn.model.tasks import TaskSpec
from firn.postgres.connection import Connection


def release_tasks(conn: Connection, plan: PlanRecord) -> None:
    """Init -> Pending for every task of a new plan (after their events are out)."""
    for spec in plan.tasks:
        move_task(
            conn,
            spec.task_id,
            TaskState.INIT,
            TaskState.PENDING,
            by=Actor.PLANNER,
            reason="published",
        )


@dataclass(frozen=True)
class WaitingTask:
    """A task of an open plan that no executor holds (Init or Pending)."""

    plan_id: int
    task_id: int
    partition_key: str
    state: TaskState
    attempt: int
    input_bytes: int

    def event(self, table: str, table_id: int) -> PlanTaskEvent:
        """The plan-task event that announces it (planner, and the dispatcher's sweep)."""
        return PlanTaskEvent(
            table=table,
            table_id=table_id,
            partition_key=self.partition_key,
            plan_id=self.plan_id,
            task_id=self.task_id,
            attempt=self.attempt,
            input_bytes=self.input_bytes,
        )


def _waiting(row: Sequence[Any]) -> WaitingTask:
    plan_id, task_id, partition_key, state, attempt, input_bytes = row
    return WaitingTask(
        int(plan_id),
        int(task_id),
        str(partition_key),
        TaskState(state),
        int(attempt),
        int(input_bytes),
    )


def waiting_tasks(
    conn: Connection, table_id: int, partition_keys: Sequence[str]
) -> list[WaitingTask]:
    """The Init and Pending tasks of the open plans of the partitions, partition by
    partition in the order given, each in plan order (one statement for them all)."""
    rows = conn.execute(
        "SELECT t.plan_id, t.task_id, t.partition_key, t.state, t.attempt, t.input_bytes "
        "FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE p.table_id = %(t)s AND p.partition_key = ANY(%(keys)s) "
        "AND p.state = ANY(%(open)s) AND t.state = ANY(%(waiting)s) "
        "ORDER BY array_position(%(keys)s, p.partition_key), t.ordinal",
        {
            "t": table_id,
            "keys": list(partition_keys),
            "open": [s.value for s in OPEN_PLAN_STATES],
            "waiting": [TaskState.INIT.value, TaskState.PENDING.value],
        },
    ).fetchall()
    return [_waiting(row) for row in rows]


def stale_waiting_tasks(
    conn: Connection, min_age_seconds: float, now_due: Sequence[int] = ()
) -> list[WaitingTask]:
    """Init and Pending tasks of open plans to announce (again): retries whose backoff
    just passed, tasks untouched for ``min_age_seconds`` (their event was lost, or
    the planner died between storing the plan and announcing it), and those of
    ``now_due`` (their lease just expired: their executor is gone, and the event that
    sent them to it was consumed); each is touched, so the next sweep does not
    announce it again at once."""
    rows = conn.execute(
        "UPDATE compaction_task t SET updated_at = now() FROM compaction_plan p "
        "WHERE p.plan_id = t.plan_id AND p.state = ANY(%s) AND t.state = ANY(%s) "
        "AND coalesce(t.not_before, '-infinity') <= now() "
        "AND (t.updated_at < now() - make_interval(secs => %s) "
        "     OR t.updated_at < t.not_before OR t.task_id = ANY(%s)) "
        "RETURNING t.plan_id, t.task_id, t.partition_key, t.state, t.attempt, t.input_bytes",
        (
            [s.value for s in OPEN_PLAN_STATES],
            [TaskState.INIT.value, TaskState.PENDING.value],
            min_age_seconds,
            list(now_due),
        ),
    ).fetchall()
    return [_waiting(row) for row in rows]


QUOTA_WINDOW_SECONDS = 300.0
"""The window a table's executor seconds are summed over for its ``compaction.quota``."""

TABLE_STANDING = """
WITH window_start AS (SELECT now() - make_interval(secs => %(window)s) AS at),
used AS (
    SELECT p.table_id, sum(spent.seconds) AS seconds
    FROM window_start w, compaction_plan p, LATERAL (
        SELECT extract(epoch FROM
            CASE WHEN t.state = 'Executing' THEN now() ELSE t.finished_at END
            - greatest(t.started_at, w.at)) AS seconds
        FROM compaction_task t
        WHERE t.plan_id = p.plan_id AND t.started_at IS NOT NULL
            AND (t.state = 'Executing' OR t.finished_at > w.at)
        OFFSET 0
    ) spent
    WHERE p.table_id = ANY(%(tables)s) AND (p.state = ANY(%(open)s) OR p.updated_at > w.at)
    GROUP BY 1
),
standing AS (
    SELECT c.table_id, coalesce(u.seconds, 0)
        >= coalesce((c.properties->>'compaction.quota')::float8, %(quota)s) * %(window)s
        AS over_quota
    FROM catalog_table c LEFT JOIN used u USING (table_id)
    WHERE c.table_id = ANY(%(tables)s)
)
"""
"""Per table of ``%(tables)s`` (those with work waiting), whether its tasks' executor
seconds over the last ``QUOTA_WINDOW_SECONDS`` (the running attempts, and the latest
attempt of tasks that ended in the window) reached ``compaction.quota`` x the window:
what the claim order puts last. Driven by those tables' plans that are open or moved
in the window (a plan moves when its tasks end, or after), by the plans' table index,
and each plan's tasks by their plan's (``OFFSET 0`` keeps the planner from hashing
every task instead): summing every task that ended in the window cost a dispatcher
30-60 ms a wake-up once a fleet ran a few thousand tasks in it, and grew with the
fleet's throughput."""


DEFAULT_QUOTA = TableProperties.parse({}).compaction_quota
"""For tables stored before ``compaction.quota`` existed."""


def queue_parameters() -> dict[str, float]:
    return {"window": QUOTA_WINDOW_SECONDS, "quota": DEFAULT_QUOTA, "aging": AGING_SECONDS}


def claimable_tasks(conn: Connection, limit: int) -> list[Candidate]:
    """Up to ``limit`` Pending tasks of open plans whose backoff has passed, in the
    order dispatchers claim them: tables within their ``compaction.quota`` first, then
    the highest plan priority (its score, aged: ``PRIORITY``), then the oldest plan,
    in plan order. Over its quota a
    table still gets the executors no other table's work is waiting for (after
    Amoro's quota per table): a hot table cannot starve the others, and an idle
    executor is not held back for nothing. So the quota is weighed only when more
    than one table has work waiting, and only for those tables (``TABLE_STANDING``):
    a dispatcher asks at every wake-up."""
    parameters = {
        **queue_parameters(),
        "open": [s.value for s in OPEN_PLAN_STATES],
        "pending": TaskState.PENDING.value,
        "limit": limit,
    }
    waiting = waiting_tables(conn)
    if not waiting:
        return []
    parameters["tables"] = waiting
    if len(waiting) == 1:
        query = _CLAIMABLE.format(standing="", over_quota="")
    else:
        query = TABLE_STANDING + _CLAIMABLE.format(
            standing="JOIN standing s USING (table_id) ", over_quota="s.over_quota, "
        )
    rows = conn.execute(query, parameters).fetchall()
    return [Candidate(int(t), int(tb), int(b), float(sc)) for t, tb, b, sc in rows]


def waiting_tables(conn: Connection) -> list[int]:
    """The tables with Pending tasks of open plans whose backoff has passed."""
    rows = conn.execute(
        _WAITING_TABLES,
        {"open": [s.value for s in OPEN_PLAN_STATES], "pending": TaskState.PENDING.value},
    ).fetchall()
    return [int(table_id) for (table_id,) in rows]


_CLAIMABLE_WHERE = (
    "p.state = ANY(%(open)s) AND t.state = %(pending)s "
    "AND (t.not_before IS NULL OR t.not_before <= now())"
)
_WAITING_TABLES = (
    "SELECT DISTINCT p.table_id FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
    "WHERE " + _CLAIMABLE_WHERE
)
AGING_SECONDS = 30.0
"""A waiting plan's claim priority grows by one score point every this many seconds:
a quiet table's plan, scored low, is not passed over for good by a busy table's
stream of higher-scored plans (a score is about a partition's unmerged change files
per node, weighted by their bytes: a handful for a busy partition)."""

PRIORITY = "p.score + extract(epoch FROM now() - p.waiting_since) / %(aging)s"
"""A plan's claim priority: its score, aged (``AGING_SECONDS``) from when its
partition began waiting (a replacement keeps the replaced plan's place)."""

_CLAIMABLE = (
    "SELECT t.task_id, p.table_id, t.input_bytes, p.score "
    "FROM compaction_task t JOIN compaction_plan p USING (plan_id) {standing}"
    "WHERE " + _CLAIMABLE_WHERE + " "
    "ORDER BY {over_quota}" + PRIORITY + " DESC, p.plan_id, t.ordinal LIMIT %(limit)s"
)


def claim_task(
    conn: Connection, task_id: int, owner: str, lease_seconds: float
) -> tuple[TaskSpec, int] | None:
    """Pending -> Executing with a new attempt and a lease; ``None`` if another
    executor got it first (or it is no longer pending)."""
    claims = claim_tasks(conn, [task_id], owner, lease_seconds)
    return claims[0] if claims else None


def claim_tasks(
    conn: Connection, task_ids: Sequence[int], owner: str, lease_seconds: float
) -> list[tuple[TaskSpec, int]]:
    """``claim_task`` for a dispatcher's whole batch in one transaction of three
    statements whatever its size (the plans locked, the tasks moved with their
    history rows, the plans moved with theirs: per-task overhead is what small merges
    pay most). The tasks another executor got first, or that are backing off, are
    left out; the others come back in ``task_ids`` order."""
    TASK.accept(TaskState.PENDING, TaskState.EXECUTING, by=Actor.DISPATCHER)
    with conn.transaction():
        lock_plans_of(conn, task_ids)
        # Every task in one statement with its history row (a retry whose backoff
        # runs is the sweep's to announce, so it is left out).
        rows = conn.execute(
            "WITH moved AS (UPDATE compaction_task SET state = %(new)s, updated_at = now(), "
            "started_at = now(), finished_at = NULL, attempt = attempt + 1, "
            "lease_owner = %(owner)s, lease_expires = now() + make_interval(secs => %(lease)s) "
            "WHERE task_id = ANY(%(ids)s) AND state = %(old)s "
            "AND (not_before IS NULL OR not_before <= now()) "
            "RETURNING task_id, attempt, spec, plan_id), "
            "history AS (INSERT INTO state_transition "
            "(machine, entity_id, from_state, to_state, attempt, reason) "
            "SELECT 'task', task_id, %(old)s, %(new)s, attempt, %(reason)s FROM moved) "
            "SELECT task_id, attempt, spec, plan_id FROM moved",
            {
                "new": TaskState.EXECUTING.value,
                "old": TaskState.PENDING.value,
                "owner": owner,
                "lease": lease_seconds,
                "ids": list(task_ids),
                "reason": f"claimed by {owner}",
            },
        ).fetchall()
        if not rows:
            return []
        attempts = {int(task_id): int(attempt) for task_id, attempt, _, _ in rows}
        specs = {
            int(task_id): (TaskSpec.from_dict(spec), int(plan_id))
            for task_id, _, spec, plan_id in rows
        }
        move_plans(
            conn,
            sorted({plan_id for _, plan_id in specs.values()}),
            (PlanState.PLANNED, PlanState.EXECUTING),
            by=Actor.DISPATCHER,
            reasons=["first claim"],
        )
    return [(specs[t][0], attempts[t]) for t in task_ids if t in attempts]
