"""The lease an executor holds on a claimed task (design §6): its heartbeat pushes the
lease forward, and the dispatcher's sweep takes back a task whose lease ran out
(Executing -> Pending), so a task whose executor died or hung runs again.

A lease is taken by ``firn.catalog.claiming.claim_task``. Taking it back makes the
old attempt stale: its late result no longer matches the task's attempt and is
dropped (``firn.catalog.results``). The moves go through ``firn.catalog.transitions``,
whose docstring gives the lock order; the sweep moves each task in a transaction of
its own, and never waits for a table row lock (``_record_killed_attempt``).
"""

from __future__ import annotations

from firn.catalog.orphans import record_orphans
from firn.catalog.transitions import move_task
from firn.model.states import Actor, TaskState
from firn.model.tasks import attempt_dir
from firn.postgres.connection import Connection


def extend_lease(
    conn: Connection, task_id: int, attempt: int, owner: str, lease_seconds: float
) -> bool:
    """The executor's heartbeat: push the lease of its running attempt forward.
    ``False`` when the attempt no longer owns the task (expired and reclaimed)."""
    row = conn.execute(
        "UPDATE compaction_task SET lease_expires = now() + make_interval(secs => %s) "
        "WHERE task_id = %s AND attempt = %s AND lease_owner = %s AND state = %s "
        "RETURNING task_id",
        (lease_seconds, task_id, attempt, owner, TaskState.EXECUTING.value),
    ).fetchone()
    return row is not None


def expire_leases(conn: Connection) -> list[int]:
    """Executing tasks whose lease ran out go back to Pending (their executor died or
    hung); returns them, for re-announcing. A late result of the old attempt is then
    stale: ``record_result`` matches on the attempt. Whatever the old attempt wrote
    can never be committed, so its directory is recorded as an orphan at once."""
    rows = conn.execute(
        "SELECT t.task_id, t.attempt, p.table_id, t.spec->>'output_prefix' "
        "FROM compaction_task t JOIN compaction_plan p USING (plan_id) "
        "WHERE t.state = %s AND t.lease_expires < now() ORDER BY t.task_id",
        (TaskState.EXECUTING.value,),
    ).fetchall()
    expired = []
    for task_id, attempt, table_id, output_prefix in rows:
        with conn.transaction():
            moved = move_task(
                conn,
                task_id,
                TaskState.EXECUTING,
                TaskState.PENDING,
                by=Actor.SWEEPER,
                attempt=attempt,
                reason="lease expired",
                updates={"lease_owner": None, "lease_expires": None},
            )
            if moved is not None:
                _record_killed_attempt(conn, table_id, attempt_dir(output_prefix, attempt), attempt)
        if moved is not None:
            expired.append(int(task_id))
    return expired


def _record_killed_attempt(conn: Connection, table_id: int, directory: str, attempt: int) -> None:
    """Record a killed attempt's directory, if that needs no wait: the row's foreign key
    takes a share lock on the table row, and a lease sweep must never queue behind
    whoever holds that row exclusively (a table being dropped, an operator's lock).
    Skipped, the files are still found by the storage sweep (``firn.catalog.orphans``)."""
    free = conn.execute(
        "SELECT 1 FROM catalog_table WHERE table_id = %s FOR KEY SHARE SKIP LOCKED", (table_id,)
    ).fetchone()
    if free is not None:
        record_orphans(conn, table_id, [f"{directory}/"], f"attempt {attempt}: lease expired")
