"""Events are wake-ups, Postgres is the truth: the catalog rows an event names.

Every handler reads what it acts on (the table, plan, partition, files, attempt)
from the catalog row named by the event's id, never from the event's other fields.
Those fields are still compared with the row: an event that disagrees with it
(another table's name or id, another plan, an attempt that never started, a snapshot
that does not exist) was forged, corrupted or comes from another deployment, and
``EventMismatchError`` sends it to the dead-letter topic having changed nothing. A
plan-task event once named another table with a compatible schema, the dispatcher
merged the task with that table's key, and the real table lost 49 of its 50 rows.

An event that agrees with its row but is simply old (an earlier attempt, a plan since
replaced) is normal under at-least-once delivery: the caller drops it quietly.
"""

from __future__ import annotations

from dataclasses import dataclass

from firn.catalog.plans import RequestView, request_view
from firn.errors import EventMismatchError
from firn.events.commits import CommitEvent
from firn.events.compactions import CompactionEvent
from firn.events.plans import PlanRequestEvent, PlanTaskEvent
from firn.events.tasks import TaskResultEvent
from firn.postgres.connection import Connection


@dataclass(frozen=True)
class TaskRow:
    """A task as the catalog has it, with its plan and table."""

    task_id: int
    plan_id: int
    table_id: int
    table: str
    partition_key: str
    state: str
    attempt: int


def task_named(conn: Connection, event: PlanTaskEvent | TaskResultEvent) -> TaskRow:
    """The task row a plan-task or task-result event names; ``EventMismatchError``
    when the event's other fields disagree with it or the attempt is one the task
    never reached."""
    what, task_id, attempt = event.event_type, event.task_id, event.attempt
    row = conn.execute(
        "SELECT t.task_id, t.plan_id, p.table_id, c.name, t.partition_key, t.state, t.attempt "
        "FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "JOIN catalog_table c ON c.table_id = p.table_id WHERE t.task_id = %s",
        (task_id,),
    ).fetchone()
    if row is None:
        raise EventMismatchError(f"{what} event names task {task_id}, which does not exist")
    task = TaskRow(*row)
    _agree(
        what,
        f"task {task_id}",
        [
            ("plan_id", event.plan_id, task.plan_id),
            ("table_id", event.table_id, task.table_id),
            ("table", event.table, task.table),
            ("partition_key", event.partition_key, task.partition_key),
        ],
    )
    if attempt > task.attempt:
        raise EventMismatchError(
            f"{what} event names attempt {attempt} of task {task_id}, "
            f"which has only reached attempt {task.attempt}"
        )
    return task


def requested_partition(conn: Connection, request: PlanRequestEvent) -> RequestView:
    """The partition a plan request names, as the request is checked against it (one
    statement: ``firn.catalog.plans.request_view``)."""
    table_id, partition_key = request.table_id, request.partition_key
    view = request_view(conn, table_id, partition_key, request.kind, request.max_seq)
    if view is None:
        raise EventMismatchError(
            f"plan-request event names partition {partition_key!r} of table id {table_id}, "
            "which does not exist"
        )
    _agree("plan-request", f"table {table_id}", [("table", request.table, view.table)])
    return view


@dataclass(frozen=True)
class CommittedFiles:
    """What one producer commit added to one partition, as the catalog has it."""

    partition_key: str
    insert_files: int
    delete_files: int
    insert_bytes: int
    delete_bytes: int


def commit_named(conn: Connection, commit: CommitEvent) -> list[CommittedFiles]:
    """The files the commit snapshot a commit event names added, per partition."""
    table_id, snapshot_id = commit.table_id, commit.snapshot_id
    # One statement: the snapshot's row, and what it added per partition (by key: a
    # snapshot adds a few files, found through the added_snapshot index).
    row = conn.execute(
        "SELECT c.name, s.kind, s.seq, (SELECT coalesce(jsonb_agg(jsonb_build_array("
        "f.partition_key, f.i, f.d, f.ib, f.db) ORDER BY f.partition_key), '[]') FROM ("
        "SELECT partition_key, count(*) FILTER (WHERE file_type = 'I') AS i, "
        "count(*) FILTER (WHERE file_type = 'D') AS d, "
        "coalesce(sum(size_bytes) FILTER (WHERE file_type = 'I'), 0) AS ib, "
        "coalesce(sum(size_bytes) FILTER (WHERE file_type = 'D'), 0) AS db "
        "FROM data_file WHERE table_id = s.table_id AND added_snapshot = s.snapshot_id "
        "GROUP BY partition_key) f) "
        "FROM snapshot s JOIN catalog_table c USING (table_id) "
        "WHERE s.table_id = %s AND s.snapshot_id = %s",
        (table_id, snapshot_id),
    ).fetchone()
    if row is None:
        if _pruned_snapshot(conn, commit):
            return []  # its files were folded and expired before the event came
        raise EventMismatchError(
            f"commit event names snapshot {snapshot_id} of table id {table_id}, "
            "which does not exist"
        )
    _agree(
        "commit",
        f"snapshot {snapshot_id}",
        [("table", commit.table, row[0]), ("kind", "commit", row[1]), ("seq", commit.seq, row[2])],
    )
    return [CommittedFiles(str(k), int(i), int(d), int(ib), int(db)) for k, i, d, ib, db in row[3]]


def compaction_named(conn: Connection, compaction: CompactionEvent) -> None:
    """Check that a compaction event names a plan committed as that snapshot."""
    plan_id = compaction.plan_id
    row = conn.execute(
        "SELECT p.table_id, c.name, p.partition_key, p.state, p.committed_snapshot "
        "FROM compaction_plan p JOIN catalog_table c USING (table_id) WHERE p.plan_id = %s",
        (plan_id,),
    ).fetchone()
    if row is None:
        if _pruned_plan(conn, compaction):
            return  # retention pruned it: a newer plan of its partition committed since
        raise EventMismatchError(f"compaction event names plan {plan_id}, which does not exist")
    _agree(
        "compaction",
        f"plan {plan_id}",
        [
            ("table_id", compaction.table_id, row[0]),
            ("table", compaction.table, row[1]),
            ("partition_key", compaction.partition_key, row[2]),
            ("state", "Committed", row[3]),
            ("snapshot_id", compaction.snapshot_id, row[4]),
        ],
    )


def _pruned_snapshot(conn: Connection, commit: CommitEvent) -> bool:
    """Whether the commit event names a snapshot its table allocated and retention
    has since pruned (``firn.catalog.pruning``): a late event, not a forged one."""
    row = conn.execute(
        "SELECT name, last_snapshot FROM catalog_table WHERE table_id = %s", (commit.table_id,)
    ).fetchone()
    return row is not None and row[0] == commit.table and 0 < commit.snapshot_id <= row[1]


def _pruned_plan(conn: Connection, compaction: CompactionEvent) -> bool:
    """Whether the compaction event names a plan retention has pruned: its table's
    snapshot it names was allocated, and a newer plan of its partition committed."""
    row = conn.execute(
        "SELECT t.name, t.last_snapshot, (SELECT max(p.plan_id) FROM compaction_plan p "
        "WHERE p.table_id = t.table_id AND p.partition_key = %s AND p.state = 'Committed') "
        "FROM catalog_table t WHERE t.table_id = %s",
        (compaction.partition_key, compaction.table_id),
    ).fetchone()
    return (
        row is not None
        and row[0] == compaction.table
        and 0 < compaction.snapshot_id <= row[1]
        and row[2] is not None
        and compaction.plan_id < row[2]
    )


def _agree(what: str, row: str, fields: list[tuple[str, object, object]]) -> None:
    wrong = [
        f"{name} {said!r} (the catalog says {truth!r})"
        for name, said, truth in fields
        if said != truth
    ]
    if wrong:
        raise EventMismatchError(
            f"{what} event disagrees with {row} in the catalog: {', '.join(wrong)}"
        )
