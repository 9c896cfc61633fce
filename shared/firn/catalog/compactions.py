"""Committing a compaction plan: ONE transaction, or nothing (design §7).

The transaction takes the table row's lock first (to allocate the snapshot id), as
producer commits do, so the two never deadlock; then the partition row. It checks
that the plan is still the partition's current plan, then the facts the plan was
made under (``firn.catalog.commit_checks``: ``max_merged_seq`` is still the one the
plan started from, every input file is still live); then it
removes the inputs (the base files rewritten and the change files folded in; base
files a fold kept stay, with the new deletion vector it gave them), adds
the outputs, sets ``max_merged_seq = S`` with its history row once no change file at
or below S is left (a tiered plan that folds some units and merges the runs of
others leaves it), creates the snapshot, and moves tasks and plan to Committed. A
minor plan only swaps change files for change files: ``max_merged_seq`` stays.

A producer committing meanwhile only adds change files with seq > S, which this
commit neither reads nor hides, so the two never conflict. Committing a plan that is
already committed changes nothing and reports the snapshot it made. A failed check
fails the plan (its outputs become orphans) so the partition can be planned again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from firn.catalog.commit_checks import InputsLive, MergedSeqUnchanged, first_failure
from firn.catalog.plans import fail_plan
from firn.catalog.transitions import move_plan, move_task
from firn.catalog.vectors import replace_vectors
from firn.errors import CommitError
from firn.events.compactions import CompactionEvent
from firn.model.files import DeletionVector
from firn.model.states import Actor, PlanOutcome, PlanState, TaskState
from firn.model.tasks import OutputFile, TaskSpec
from firn.postgres.connection import Connection


@dataclass(frozen=True)
class PlanCommit:
    """What committing a plan did."""

    plan_id: int
    outcome: PlanOutcome
    snapshot_id: int | None = None
    reason: str = ""
    removed_files: int = 0
    added_files: int = 0
    added_bytes: int = 0
    added_rows: int = 0
    moved_files: int = 0
    moved_bytes: int = 0
    """Of the added files, those moved from the change store as they were (counted in
    ``added_*`` too, but not written again)."""
    kept_files: int = 0
    """Base files the plan's folds read but kept (not rewritten, not in ``added_*``)."""
    vector_files: int = 0
    vector_bytes: int = 0
    """New deletion vectors given to kept base files."""
    merged_seq_advanced: bool = False
    """Whether the commit moved its partition's ``max_merged_seq`` (a fold that left
    no change behind): only then did producer commits become compacted."""

    @property
    def written_bytes(self) -> int:
        """Bytes the plan's tasks wrote: the added files less the moved ones, and the
        deletion vectors."""
        return self.added_bytes - self.moved_bytes + self.vector_bytes


class _CheckFailedError(Exception):
    pass


def commit_plan(conn: Connection, plan_id: int) -> PlanCommit:
    """Commit ``plan_id`` if every task is Prepared; idempotent."""
    if _still_running(conn, plan_id):
        # Most calls (one per prepared task) find the plan incomplete: say so without
        # taking the table lock that producers' commits wait for.
        return PlanCommit(plan_id, PlanOutcome.WAITING, reason="not every task is Prepared")
    try:
        with conn.transaction():
            return _commit(conn, plan_id)
    except _CheckFailedError as exc:
        fail_plan(conn, plan_id, str(exc), by=Actor.COMMITTER)
        return PlanCommit(plan_id, PlanOutcome.FAILED, reason=str(exc))


def _still_running(conn: Connection, plan_id: int) -> bool:
    row = conn.execute(
        "SELECT p.state, bool_or(t.state <> %s) FROM compaction_plan p "
        "JOIN compaction_task t USING (plan_id) WHERE p.plan_id = %s GROUP BY p.state",
        (TaskState.PREPARED.value, plan_id),
    ).fetchone()
    open_states = (PlanState.PLANNED, PlanState.EXECUTING, PlanState.COMMITTING)
    return row is not None and row[0] in open_states and bool(row[1])


@dataclass(frozen=True)
class _OpenPlan:
    """A plan that may commit, locked: its row and its tasks' rows."""

    plan_id: int
    table_id: int
    partition_key: str
    kind: str
    state: PlanState
    from_seq: int
    to_seq: int
    tasks: Sequence[Any]
    """(task_id, state, attempt, spec, outputs) of every task, in order."""


@dataclass(frozen=True)
class _Outputs:
    """What the plan's tasks wrote, as the commit needs it."""

    specs: list[TaskSpec]
    added: list[OutputFile]
    """New files: every output but the base inputs a fold kept (``carried``)."""
    kept: dict[int, OutputFile]
    """Base inputs a fold kept, by file id (``firn.engine.vectors``): not removed."""
    vectors: dict[int, DeletionVector]
    """The new deletion vectors of kept base files."""
    schema_ids: dict[str, int]

    @classmethod
    def of(cls, tasks: Sequence[Any]) -> _Outputs:
        specs = [TaskSpec.from_dict(t[3]) for t in tasks]
        everything = [OutputFile.from_dict(o) for t in tasks for o in (t[4] or [])]
        kept = {o.replaces: o for o in everything if o.replaces is not None}
        inputs_of = {f.file_id: f for s in specs for f in s.base_files}
        vectors = {
            fid: o.deletion_vector
            for fid, o in kept.items()
            if o.deletion_vector is not None and o.deletion_vector != inputs_of[fid].deletion_vector
        }
        added = [o for o in everything if not o.carried]
        return cls(specs, added, kept, vectors, _output_schema_ids(tasks, specs))

    @property
    def base_inputs(self) -> list[int]:
        return sorted({f.file_id for s in self.specs for f in s.base_files})

    @property
    def change_inputs(self) -> list[int]:
        return sorted({f.file_id for s in self.specs for f in s.change_files})

    @property
    def folded_base(self) -> list[int]:
        """The base inputs that leave the live set: a fold's (a merge of runs leaves
        the base alone), but those it kept."""
        folded = {f.file_id for s in self.specs if s.kind != "minor" for f in s.base_files}
        return sorted(folded - set(self.kept))

    @property
    def moved(self) -> list[OutputFile]:
        """Added files that are change inputs moved to the base store as they were."""
        folded_paths = {f.path for s in self.specs for f in s.change_files}
        return [o for o in self.added if o.path in folded_paths]


def _commit(conn: Connection, plan_id: int) -> PlanCommit:
    plan = _lock_open_plan(conn, plan_id)
    if isinstance(plan, PlanCommit):
        return plan
    outputs = _Outputs.of(plan.tasks)
    snapshot_id, now = conn.execute(
        "UPDATE catalog_table SET last_snapshot = last_snapshot + 1 WHERE table_id = %s "
        "RETURNING last_snapshot, now()",
        (plan.table_id,),
    ).fetchone()  # type: ignore[misc]
    checks = (
        MergedSeqUnchanged(plan.table_id, plan.partition_key, plan.from_seq),
        InputsLive(outputs.base_inputs + outputs.change_inputs),
    )
    if (failure := first_failure(conn, checks)) is not None:
        raise _CheckFailedError(failure)
    removed = _swap_files(conn, plan, outputs, snapshot_id)
    merged_to = _advance_merged_seq(conn, plan, snapshot_id, now)
    moved = outputs.moved
    result = PlanCommit(
        plan_id,
        PlanOutcome.COMMITTED,
        snapshot_id=snapshot_id,
        merged_seq_advanced=merged_to != plan.from_seq,
        removed_files=removed,
        added_files=len(outputs.added),
        added_bytes=sum(o.size_bytes for o in outputs.added),
        added_rows=sum(o.record_count for o in outputs.added),
        moved_files=len(moved),
        moved_bytes=sum(o.size_bytes for o in moved),
        kept_files=len(outputs.kept),
        vector_files=len(outputs.vectors),
        vector_bytes=sum(v.size_bytes for v in outputs.vectors.values()),
    )
    _record_snapshot(conn, plan, result, merged_to, now)
    _mark_committed(conn, plan, snapshot_id)
    return result


def _lock_open_plan(conn: Connection, plan_id: int) -> _OpenPlan | PlanCommit:
    """The plan and its tasks, locked, when it may commit; else what to answer
    (``stale``, ``already``, ``waiting``)."""
    where = conn.execute(
        "SELECT table_id, partition_key FROM compaction_plan WHERE plan_id = %s", (plan_id,)
    ).fetchone()
    if where is None:
        return PlanCommit(plan_id, PlanOutcome.STALE, reason="no such plan")
    # Locks in the one order every writer uses (see firn.catalog.transitions): the table row
    # (as producers do), the partition, the plan, its tasks.
    conn.execute("SELECT 1 FROM catalog_table WHERE table_id = %s FOR UPDATE", (where[0],))
    conn.execute(
        "SELECT 1 FROM catalog_partition WHERE table_id = %s AND partition_key = %s FOR UPDATE",
        where,
    )
    # Stamp the partition changed (migration 0015's trigger): the metrics service's
    # periodic check reads it again, whatever the plan did to its files.
    conn.execute(
        "UPDATE catalog_partition SET changed = 0 WHERE table_id = %s AND partition_key = %s",
        where,
    )
    row = conn.execute(
        "SELECT table_id, partition_key, kind, state, from_merged_seq, to_seq, "
        "committed_snapshot FROM compaction_plan WHERE plan_id = %s FOR UPDATE",
        (plan_id,),
    ).fetchone()
    if row is None:
        return PlanCommit(plan_id, PlanOutcome.STALE, reason="no such plan")
    table_id, partition, kind, state, from_seq, to_seq, committed = row
    if state == PlanState.COMMITTED:
        return PlanCommit(plan_id, PlanOutcome.ALREADY, snapshot_id=committed)
    if state in (PlanState.FAILED, PlanState.REPLACED):
        return PlanCommit(plan_id, PlanOutcome.STALE, reason=f"plan is {state}")
    tasks = conn.execute(
        "SELECT task_id, state, attempt, spec, outputs FROM compaction_task "
        "WHERE plan_id = %s ORDER BY ordinal",
        (plan_id,),
    ).fetchall()
    if any(TaskState(t[1]) != TaskState.PREPARED for t in tasks):
        return PlanCommit(plan_id, PlanOutcome.WAITING, reason="not every task is Prepared")
    return _OpenPlan(plan_id, table_id, partition, kind, PlanState(state), from_seq, to_seq, tasks)


def _swap_files(conn: Connection, plan: _OpenPlan, outputs: _Outputs, snapshot_id: int) -> int:
    """Exactly the inputs leave the live set (each task's change files, and a fold's
    base files), the kept files get their new deletion vectors, and the outputs are
    added; the files removed. Nothing else is hidden, so a plan that folds some
    units never touches another unit's changes."""
    removed = conn.execute(
        "UPDATE data_file SET removed_snapshot = %s WHERE file_id = ANY(%s)",
        (snapshot_id, outputs.change_inputs + outputs.folded_base),
    ).rowcount
    try:
        replace_vectors(conn, plan.table_id, snapshot_id, outputs.vectors)
    except CommitError as exc:
        raise _CheckFailedError(str(exc)) from exc
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, "
            "seq, path, size_bytes, record_count, min_key, max_key, added_snapshot, schema_id) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                _output_row(
                    plan.table_id, plan.partition_key, o, snapshot_id, outputs.schema_ids[o.path]
                )
                for o in outputs.added
            ],
        )
    return removed


def _advance_merged_seq(conn: Connection, plan: _OpenPlan, snapshot_id: int, now: Any) -> int:
    """The partition's ``max_merged_seq`` after the commit. ``= S`` says every change
    up to S is in base: true once no change file at or below S is live (a tiered plan
    may fold some units and not others), never after a merge of runs."""
    table_id, partition, to_seq = plan.table_id, plan.partition_key, plan.to_seq
    if plan.kind == "minor" or _unfolded_at_or_below(conn, table_id, partition, to_seq):
        return plan.from_seq
    conn.execute(
        "UPDATE catalog_partition SET max_merged_seq = %s, last_major_at = %s "
        "WHERE table_id = %s AND partition_key = %s",
        (to_seq, now, table_id, partition),
    )
    conn.execute(
        "INSERT INTO partition_merge_history (table_id, partition_key, snapshot_id, "
        "max_merged_seq) VALUES (%s, %s, %s, %s)",
        (table_id, partition, snapshot_id, to_seq),
    )
    return to_seq


def _record_snapshot(
    conn: Connection, plan: _OpenPlan, result: PlanCommit, merged_to: int, now: Any
) -> None:
    summary = {
        "plan_id": plan.plan_id,
        "kind": plan.kind,
        "partition": plan.partition_key,
        "max_merged_seq": merged_to,
        "removed_files": result.removed_files,
        "added_files": result.added_files,
        "added_bytes": result.added_bytes,
        "added_rows": result.added_rows,
        "moved_files": result.moved_files,
        "moved_bytes": result.moved_bytes,
        "kept_files": result.kept_files,
        "vector_files": result.vector_files,
        "vector_bytes": result.vector_bytes,
    }
    conn.execute(
        "INSERT INTO snapshot (table_id, snapshot_id, kind, created_at, summary) "
        "VALUES (%s, %s, 'compaction', %s, %s)",
        (plan.table_id, result.snapshot_id, now, json.dumps(summary)),
    )


def _mark_committed(conn: Connection, plan: _OpenPlan, snapshot_id: int) -> None:
    """Every task Prepared -> Committed, the plan through Committing to Committed."""
    for task_id, _, attempt, _, _ in plan.tasks:
        move_task(
            conn,
            task_id,
            TaskState.PREPARED,
            TaskState.COMMITTED,
            by=Actor.COMMITTER,
            attempt=attempt,
            reason=f"snapshot {snapshot_id}",
        )
    move_plan(
        conn,
        plan.plan_id,
        plan.state,
        PlanState.COMMITTING,
        by=Actor.COMMITTER,
        reason="all tasks prepared",
    )
    move_plan(
        conn,
        plan.plan_id,
        PlanState.COMMITTING,
        PlanState.COMMITTED,
        by=Actor.COMMITTER,
        reason="committed",
    )
    conn.execute(
        "UPDATE compaction_plan SET committed_snapshot = %s WHERE plan_id = %s",
        (snapshot_id, plan.plan_id),
    )


def _unfolded_at_or_below(conn: Connection, table_id: int, partition: str, seq: int) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM data_file WHERE table_id = %s AND partition_key = %s "
        "AND store = 'change' AND removed_snapshot IS NULL AND seq <= %s)",
        (table_id, partition, seq),
    ).fetchone()
    return bool(row and row[0])


def _output_schema_ids(tasks: Sequence[Any], specs: Sequence[TaskSpec]) -> dict[str, int]:
    """The schema version of each output file: a file a task wrote is of its spec's
    version (what its kernel wrote with); a change file a move made a base file keeps
    the version it was written under."""
    out: dict[str, int] = {}
    for task, spec in zip(tasks, specs, strict=True):
        moved = {f.path: f.schema_id for f in spec.change_files} if spec.move else {}
        for o in task[4] or []:
            path = o["path"]
            out[path] = moved.get(path, spec.schema_id)
    return out


def _output_row(
    table_id: int, partition: str, o: OutputFile, snapshot_id: int, schema_id: int
) -> tuple[Any, ...]:
    return (
        table_id,
        partition,
        "base" if o.file_type == "B" else "change",
        o.file_type,
        o.node_m,
        o.node_i,
        o.seq,
        o.path,
        o.size_bytes,
        o.record_count,
        None if o.min_key is None else json.dumps(o.min_key),
        None if o.max_key is None else json.dumps(o.max_key),
        snapshot_id,
        schema_id,
    )


def committable_plans(conn: Connection) -> list[int]:
    """Plans whose every task is Prepared but which are not committed: what the
    committer's sweep commits when a task-result event was lost."""
    rows = conn.execute(
        "SELECT p.plan_id FROM compaction_plan p WHERE p.state = ANY(%s) "
        "AND NOT EXISTS (SELECT 1 FROM compaction_task t WHERE t.plan_id = p.plan_id "
        "AND t.state <> %s) ORDER BY p.plan_id",
        ([PlanState.EXECUTING.value, PlanState.COMMITTING.value], TaskState.PREPARED.value),
    ).fetchall()
    return [int(r[0]) for r in rows]


def compaction_event(conn: Connection, plan_id: int) -> CompactionEvent | None:
    """The event announcing a committed plan (None unless it is committed)."""
    row = conn.execute(
        "SELECT t.name, p.table_id, p.partition_key, p.kind, p.committed_snapshot, s.summary, "
        "s.created_at FROM compaction_plan p JOIN catalog_table t USING (table_id) "
        "JOIN snapshot s ON s.table_id = p.table_id AND s.snapshot_id = p.committed_snapshot "
        "WHERE p.plan_id = %s AND p.state = %s",
        (plan_id, PlanState.COMMITTED.value),
    ).fetchone()
    if row is None:
        return None
    name, table_id, partition, kind, snapshot_id, summary, at = row
    return CompactionEvent(
        table=name,
        table_id=table_id,
        partition_key=partition,
        plan_id=plan_id,
        kind=kind,
        snapshot_id=snapshot_id,
        max_merged_seq=summary["max_merged_seq"],
        removed_files=summary["removed_files"],
        added_files=summary["added_files"],
        added_bytes=summary["added_bytes"],
        added_rows=summary["added_rows"],
        committed_at=at,
    )
