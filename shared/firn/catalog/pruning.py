"""Retention of the catalog's own history (issue 37): the rows that every commit and
compaction adds and nothing else ever removes, so a busy fleet's catalog stays the
size of what retention keeps instead of growing for ever.

Run by expiry (``firn.catalog.expiry``) for one table after its expired files and
their rows are gone, with the same ``keep_from`` (the oldest snapshot still readable)
and cutoff (now minus ``snapshot.retention``). What goes:

- **plans** that ended (Committed, Failed, Replaced) before the cutoff and whose
  snapshot is no longer readable, with their tasks and the state transitions of
  both. The newest committed plan of each partition stays: ``firn status`` reads
  how long the last compaction waited from it, and the metrics service what the
  last compaction was.
- **max_merged_seq history** (``partition_merge_history``) before ``keep_from``,
  except each partition's newest row at or before it: a reader pinned at
  ``keep_from`` reads its partitions' merged seqs from that row.
- **snapshot rows** before ``keep_from`` that nothing still names: no remaining
  file row was added by one (a live base file written long ago keeps its snapshot,
  and with it what the write-amplification figures count), no remaining plan
  committed one, no remaining merge-history row was written by one. Reading a
  pruned snapshot raises ``SnapshotExpiredError`` as reading an expired one does
  (``firn.catalog.files.check_snapshot``); a commit event naming one that arrives
  late is acknowledged with nothing to do (``firn.catalog.event_rows``).
- **stream micro-batch records** committed before the cutoff, except each
  query's newest: Spark replays at most the batch after the last one it recorded
  as done, so only the newest record decides whether a replay commits again.

Deletes go in batches of ``BATCH`` rows, one transaction each, so a table with a
long history never holds its rows locked for long; each step is idempotent, so a
run that dies is finished by the next. A dry run performs the same deletes in one
transaction and rolls it back, so its counts are exactly what a real run would do.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from firn.model.states import PlanState
from firn.postgres.connection import Connection

BATCH = 1000
"""Rows of one kind deleted per transaction."""

_ENDED = [PlanState.COMMITTED.value, PlanState.FAILED.value, PlanState.REPLACED.value]


@dataclass(frozen=True)
class PrunedHistory:
    """History rows of one table that retention deleted (or, dry, would delete)."""

    plans: int = 0
    tasks: int = 0
    transitions: int = 0
    merge_history: int = 0
    snapshots: int = 0
    stream_batches: int = 0

    @property
    def rows(self) -> int:
        return (
            self.plans
            + self.tasks
            + self.transitions
            + self.merge_history
            + self.snapshots
            + self.stream_batches
        )


def prune_history(
    conn: Connection,
    table_id: int,
    keep_from: int,
    cutoff: dt.datetime,
    *,
    dry_run: bool = False,
    dropped_files: list[int] | None = None,
) -> PrunedHistory:
    """Delete ``table_id``'s history rows that retention no longer keeps. A dry run
    first deletes ``dropped_files`` (the file rows the real run deletes before this
    step) in the same rolled-back transaction, so snapshots they name count as gone."""
    params = {"t": table_id, "keep": keep_from, "cutoff": cutoff, "ended": _ENDED, "n": BATCH}
    if not dry_run:
        return _prune(conn, params)
    # The batches' transactions become savepoints inside this one.
    with conn.transaction(force_rollback=True):
        if dropped_files:
            conn.execute("DELETE FROM data_file WHERE file_id = ANY(%s)", (dropped_files,))
        return _prune(conn, params)


def _prune(conn: Connection, params: dict[str, Any]) -> PrunedHistory:
    plans, tasks, transitions = _prune_plans(conn, params)
    return PrunedHistory(
        plans=plans,
        tasks=tasks,
        transitions=transitions,
        merge_history=_delete_all(conn, _MERGE_HISTORY, params),
        snapshots=_delete_all(conn, _SNAPSHOTS, params),
        stream_batches=_delete_all(conn, _STREAM_BATCHES, params),
    )


_PLANS = (
    "SELECT p.plan_id FROM compaction_plan p WHERE p.table_id = %(t)s "
    "AND p.state = ANY(%(ended)s) AND p.updated_at < %(cutoff)s "
    "AND coalesce(p.committed_snapshot, 0) < %(keep)s "
    "AND (p.state <> 'Committed' OR EXISTS (SELECT 1 FROM compaction_plan n "
    "WHERE n.table_id = p.table_id AND n.partition_key = p.partition_key "
    "AND n.state = 'Committed' AND n.plan_id > p.plan_id)) "
    "ORDER BY p.plan_id LIMIT %(n)s"
)


def _prune_plans(conn: Connection, params: dict[str, Any]) -> tuple[int, int, int]:
    plans = tasks = transitions = 0
    while True:
        with conn.transaction():
            plan_ids = [int(r[0]) for r in conn.execute(_PLANS, params).fetchall()]
            task_ids = [
                int(r[0])
                for r in conn.execute(
                    "SELECT task_id FROM compaction_task WHERE plan_id = ANY(%s)", (plan_ids,)
                ).fetchall()
            ]
            for machine, ids in (("task", task_ids), ("plan", plan_ids)):
                transitions += conn.execute(
                    "DELETE FROM state_transition WHERE machine = %s AND entity_id = ANY(%s)",
                    (machine, ids),
                ).rowcount
            # Tasks go with their plan (ON DELETE CASCADE).
            plans += conn.execute(
                "DELETE FROM compaction_plan WHERE plan_id = ANY(%s)", (plan_ids,)
            ).rowcount
            tasks += len(task_ids)
        if len(plan_ids) < params["n"]:
            return plans, tasks, transitions


_MERGE_HISTORY = (
    "DELETE FROM partition_merge_history h WHERE (h.table_id, h.partition_key, h.snapshot_id) "
    "IN (SELECT o.table_id, o.partition_key, o.snapshot_id FROM partition_merge_history o "
    "WHERE o.table_id = %(t)s AND o.snapshot_id < %(keep)s AND EXISTS (SELECT 1 "
    "FROM partition_merge_history n WHERE n.table_id = o.table_id "
    "AND n.partition_key = o.partition_key AND n.snapshot_id > o.snapshot_id "
    "AND n.snapshot_id <= %(keep)s) LIMIT %(n)s)"
)

_SNAPSHOTS = (
    "DELETE FROM snapshot s WHERE (s.table_id, s.snapshot_id) IN (SELECT o.table_id, "
    "o.snapshot_id FROM snapshot o WHERE o.table_id = %(t)s AND o.snapshot_id < %(keep)s "
    "AND NOT EXISTS (SELECT 1 FROM data_file d WHERE d.table_id = o.table_id "
    "AND d.added_snapshot = o.snapshot_id) "
    "AND NOT EXISTS (SELECT 1 FROM compaction_plan p WHERE p.table_id = o.table_id "
    "AND p.committed_snapshot = o.snapshot_id) "
    "AND NOT EXISTS (SELECT 1 FROM partition_merge_history h WHERE h.table_id = o.table_id "
    "AND h.snapshot_id = o.snapshot_id) LIMIT %(n)s)"
)

_STREAM_BATCHES = (
    "DELETE FROM stream_batch b WHERE (b.table_id, b.query_id, b.batch_id) IN (SELECT "
    "o.table_id, o.query_id, o.batch_id FROM stream_batch o WHERE o.table_id = %(t)s "
    "AND o.committed_at < %(cutoff)s AND EXISTS (SELECT 1 FROM stream_batch n "
    "WHERE n.table_id = o.table_id AND n.query_id = o.query_id AND n.batch_id > o.batch_id) "
    "LIMIT %(n)s)"
)


def _delete_all(conn: Connection, statement: str, params: dict[str, Any]) -> int:
    deleted = 0
    while True:
        with conn.transaction():
            done = conn.execute(statement, params).rowcount
        deleted += done
        if done < params["n"]:
            return deleted
