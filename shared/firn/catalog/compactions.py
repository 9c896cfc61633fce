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

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from firn.catalog.commit_checks import CommitFacts, InputsLive, MergedSeqUnchanged, first_failure
from firn.catalog.plans import fail_plan
from firn.catalog.transitions import move_plans, move_tasks
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
    from_merged_seq: int = 0
    """The partition's ``max_merged_seq`` the plan started from."""
    event: CompactionEvent | None = None
    """The compaction event announcing the plan, when this call committed it: made
    from the commit itself, so announcing it reads nothing back (``compaction_event``
    does, for a plan committed earlier)."""
    tasks: tuple[tuple[int, int], ...] = ()
    """(task_id, attempt) of each of the plan's tasks, when this call committed it."""

    @property
    def written_bytes(self) -> int:
        """Bytes the plan's tasks wrote: the added files less the moved ones, and the
        deletion vectors."""
        return self.added_bytes - self.moved_bytes + self.vector_bytes


class _CheckFailedError(Exception):
    def __init__(self, plan_id: int, reason: str) -> None:
        super().__init__(reason)
        self.plan_id = plan_id
        self.reason = reason


def commit_plan(conn: Connection, plan_id: int) -> PlanCommit:
    """Commit ``plan_id`` if every task is Prepared; idempotent."""
    return commit_plans(conn, [plan_id])[0]


def commit_plans(conn: Connection, plan_ids: Sequence[int]) -> list[PlanCommit]:
    """Commit those of ``plan_ids`` (plans of ONE table) whose every task is Prepared,
    in one transaction and one snapshot; what became of each, in order. Idempotent.

    Each plan is still its own partition's: its checks, its files, its partition's
    merged seq and history row, its own outcome. What they share is the table lock,
    the snapshot and the transaction, which a fleet of small tables otherwise paid
    once per partition. A plan that fails its checks fails alone: the transaction
    is rolled back, that plan failed, and the rest committed again without it."""
    if not plan_ids:
        return []
    answers = _answered_without_locks(conn, plan_ids)
    todo = [p for p in dict.fromkeys(plan_ids) if p not in answers]
    while todo:
        try:
            with conn.transaction():
                answers.update(_commit(conn, todo))
            break
        except _CheckFailedError as exc:
            fail_plan(conn, exc.plan_id, exc.reason, by=Actor.COMMITTER)
            answers[exc.plan_id] = PlanCommit(exc.plan_id, PlanOutcome.FAILED, reason=exc.reason)
            todo.remove(exc.plan_id)
    return [answers[p] for p in plan_ids]


def ready_plans_beside(conn: Connection, plan_id: int) -> list[int]:
    """The other plans of ``plan_id``'s table whose every task is Prepared but which
    are not committed: what may commit in the same transaction (``commit_plans``)."""
    rows = conn.execute(
        "SELECT p.plan_id FROM compaction_plan p WHERE p.table_id = "
        "(SELECT table_id FROM compaction_plan WHERE plan_id = %s) AND p.plan_id <> %s "
        "AND p.state = ANY(%s) AND NOT EXISTS (SELECT 1 FROM compaction_task t "
        "WHERE t.plan_id = p.plan_id AND t.state <> %s) ORDER BY p.plan_id",
        (plan_id, plan_id, _COMMITTABLE_STATES, TaskState.PREPARED.value),
    ).fetchall()
    return [int(r[0]) for r in rows]


_COMMITTABLE_STATES = [PlanState.EXECUTING.value, PlanState.COMMITTING.value]


def _answered_without_locks(conn: Connection, plan_ids: Sequence[int]) -> dict[int, PlanCommit]:
    """What can be said of each plan without taking the table lock that producers'
    commits wait for: gone, committed already, failed or replaced, or still running
    (most calls, one per prepared task, find their plan incomplete). A plan's state
    only moves forward and a committed plan's snapshot is set with its state, so
    these answers stand; the rest are looked at again under the locks."""
    rows = conn.execute(
        "SELECT p.plan_id, p.state, p.committed_snapshot, bool_or(t.state <> %s) "
        "FROM compaction_plan p LEFT JOIN compaction_task t USING (plan_id) "
        "WHERE p.plan_id = ANY(%s) GROUP BY p.plan_id",
        (TaskState.PREPARED.value, list(plan_ids)),
    ).fetchall()
    found = {int(r[0]): r for r in rows}
    answers: dict[int, PlanCommit] = {}
    for plan_id in plan_ids:
        row = found.get(plan_id)
        if row is None:
            answers[plan_id] = PlanCommit(plan_id, PlanOutcome.STALE, reason="no such plan")
            continue
        state = PlanState(row[1])
        if state == PlanState.COMMITTED:
            answers[plan_id] = PlanCommit(plan_id, PlanOutcome.ALREADY, snapshot_id=row[2])
        elif state in (PlanState.FAILED, PlanState.REPLACED):
            answers[plan_id] = PlanCommit(plan_id, PlanOutcome.STALE, reason=f"plan is {state}")
        elif row[3]:
            answers[plan_id] = PlanCommit(
                plan_id, PlanOutcome.WAITING, reason="not every task is Prepared"
            )
    return answers


@dataclass(frozen=True)
class _OpenPlan:
    """A plan that may commit, locked: its row and its tasks' rows."""

    plan_id: int
    table_id: int
    table_name: str
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


def _commit(conn: Connection, plan_ids: Sequence[int]) -> dict[int, PlanCommit]:
    """The commit of the plans that may commit, under their locks. Each plan's checks,
    file swap and merged seq are its own; each step is one statement for all the plans
    (a table's gathered plans commit together, and a statement per step and plan was
    most of a fold's catalog round trips)."""
    locked, merged_seqs = _lock_open_plans(conn, plan_ids)
    answers = {p: a for p, a in locked.items() if isinstance(a, PlanCommit)}
    plans = [a for a in locked.values() if isinstance(a, _OpenPlan)]
    if not plans:
        return answers
    table_id = plans[0].table_id
    snapshot_id, now = conn.execute(
        "UPDATE catalog_table SET last_snapshot = last_snapshot + 1 WHERE table_id = %s "
        "RETURNING last_snapshot, now()",
        (table_id,),
    ).fetchone()  # type: ignore[misc]
    outputs = {plan.plan_id: _Outputs.of(plan.tasks) for plan in plans}
    inputs = {p: o.base_inputs + o.change_inputs for p, o in outputs.items()}
    facts = CommitFacts.read(conn, merged_seqs, [f for ids in inputs.values() for f in ids])
    for plan in plans:
        checks = (
            MergedSeqUnchanged(plan.partition_key, plan.from_seq),
            InputsLive(inputs[plan.plan_id]),
        )
        if (failure := first_failure(facts, checks)) is not None:
            raise _CheckFailedError(plan.plan_id, failure)
    removed = _swap_files(conn, plans, outputs, snapshot_id)
    merged = _advance_merged_seqs(conn, plans, snapshot_id, now)
    summaries: list[dict[str, Any]] = []
    for plan in plans:
        out, merged_to = outputs[plan.plan_id], merged[plan.plan_id]
        moved = out.moved
        result = PlanCommit(
            plan.plan_id,
            PlanOutcome.COMMITTED,
            snapshot_id=snapshot_id,
            merged_seq_advanced=merged_to != plan.from_seq,
            removed_files=removed[plan.plan_id],
            added_files=len(out.added),
            added_bytes=sum(o.size_bytes for o in out.added),
            added_rows=sum(o.record_count for o in out.added),
            moved_files=len(moved),
            moved_bytes=sum(o.size_bytes for o in moved),
            kept_files=len(out.kept),
            vector_files=len(out.vectors),
            vector_bytes=sum(v.size_bytes for v in out.vectors.values()),
            from_merged_seq=plan.from_seq,
        )
        summary = _summary(plan, result, merged_to)
        event = _event(
            plan.table_name,
            table_id,
            plan.partition_key,
            plan.plan_id,
            plan.kind,
            snapshot_id,
            summary,
            now,
        )
        summaries.append(summary)
        tasks = tuple((int(task[0]), int(task[2])) for task in plan.tasks)
        answers[plan.plan_id] = dataclasses.replace(result, event=event, tasks=tasks)
    _record_snapshot(conn, table_id, snapshot_id, summaries, now)
    _mark_committed(conn, plans, snapshot_id)
    return answers


def _lock_open_plans(
    conn: Connection, plan_ids: Sequence[int]
) -> tuple[dict[int, _OpenPlan | PlanCommit], dict[str, int]]:
    """Each plan and its tasks, locked, when it may commit; else what to answer
    (``stale``, ``already``, ``waiting``); and the locked partitions' ``max_merged_seq``."""
    where = conn.execute(
        "SELECT DISTINCT table_id, partition_key FROM compaction_plan WHERE plan_id = ANY(%s) "
        "ORDER BY partition_key",
        (list(plan_ids),),
    ).fetchall()
    tables = {int(r[0]) for r in where}
    if len(tables) > 1:
        raise ValueError(f"plans {list(plan_ids)} are of several tables {sorted(tables)}")
    answers: dict[int, _OpenPlan | PlanCommit] = {
        p: PlanCommit(p, PlanOutcome.STALE, reason="no such plan") for p in plan_ids
    }
    if not where:
        return answers, {}
    table_id, partitions = tables.pop(), [r[1] for r in where]
    # Locks in the one order every writer uses (see firn.catalog.transitions): the table
    # row (as producers do), the partitions in key order, the plans, their tasks.
    (table_name,) = conn.execute(
        "SELECT name FROM catalog_table WHERE table_id = %s FOR UPDATE", (table_id,)
    ).fetchone()  # type: ignore[misc]
    # Stamp the partitions changed (migration 0015's trigger): the metrics service's
    # periodic check reads them again, whatever the plans did to their files.
    merged_seqs = {
        str(partition): int(seq)
        for partition, seq in conn.execute(
            "WITH locked AS (SELECT partition_key FROM catalog_partition WHERE table_id = %(t)s "
            "AND partition_key = ANY(%(p)s) ORDER BY partition_key FOR UPDATE) "
            "UPDATE catalog_partition c SET changed = 0 FROM locked "
            "WHERE c.table_id = %(t)s AND c.partition_key = locked.partition_key "
            "RETURNING c.partition_key, c.max_merged_seq",
            {"t": table_id, "p": partitions},
        ).fetchall()
    }
    rows = conn.execute(
        "SELECT plan_id, table_id, partition_key, kind, state, from_merged_seq, to_seq, "
        "committed_snapshot FROM compaction_plan WHERE plan_id = ANY(%s) ORDER BY plan_id "
        "FOR UPDATE",
        (list(plan_ids),),
    ).fetchall()
    tasks: dict[int, list[Any]] = {}
    for row in conn.execute(
        "SELECT plan_id, task_id, state, attempt, spec, outputs FROM compaction_task "
        "WHERE plan_id = ANY(%s) ORDER BY plan_id, ordinal",
        (list(plan_ids),),
    ):
        tasks.setdefault(int(row[0]), []).append(row[1:])
    for plan_id, table, partition, kind, state, from_seq, to_seq, committed in rows:
        if state == PlanState.COMMITTED:
            answers[plan_id] = PlanCommit(plan_id, PlanOutcome.ALREADY, snapshot_id=committed)
        elif state in (PlanState.FAILED, PlanState.REPLACED):
            answers[plan_id] = PlanCommit(plan_id, PlanOutcome.STALE, reason=f"plan is {state}")
        elif any(TaskState(t[1]) != TaskState.PREPARED for t in tasks.get(plan_id, [])):
            answers[plan_id] = PlanCommit(
                plan_id, PlanOutcome.WAITING, reason="not every task is Prepared"
            )
        else:
            answers[plan_id] = _OpenPlan(
                plan_id,
                table,
                table_name,
                partition,
                kind,
                PlanState(state),
                from_seq,
                to_seq,
                tasks.get(plan_id, []),
            )
    return answers, merged_seqs


def _swap_files(
    conn: Connection,
    plans: Sequence[_OpenPlan],
    outputs: Mapping[int, _Outputs],
    snapshot_id: int,
) -> dict[int, int]:
    """Exactly the inputs leave the live set (each task's change files, and a fold's
    base files), the kept files get their new deletion vectors, and the outputs are
    added; the files each plan removed. Nothing else is hidden, so a plan that folds
    some units never touches another unit's changes."""
    leaving = {p: set(o.change_inputs + o.folded_base) for p, o in outputs.items()}
    gone = {
        int(r[0])
        for r in conn.execute(
            "UPDATE data_file SET removed_snapshot = %s WHERE file_id = ANY(%s) RETURNING file_id",
            (snapshot_id, sorted(set().union(*leaving.values()))),
        ).fetchall()
    }
    for plan in plans:
        try:
            replace_vectors(conn, plan.table_id, snapshot_id, outputs[plan.plan_id].vectors)
        except CommitError as exc:
            raise _CheckFailedError(plan.plan_id, str(exc)) from exc
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, "
            "seq, path, size_bytes, record_count, min_key, max_key, added_snapshot, schema_id) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                _output_row(
                    plan.table_id,
                    plan.partition_key,
                    o,
                    snapshot_id,
                    outputs[plan.plan_id].schema_ids[o.path],
                )
                for plan in plans
                for o in outputs[plan.plan_id].added
            ],
        )
    return {p: len(ids & gone) for p, ids in leaving.items()}


def _advance_merged_seqs(
    conn: Connection, plans: Sequence[_OpenPlan], snapshot_id: int, now: Any
) -> dict[int, int]:
    """Each plan's partition's ``max_merged_seq`` after the commit. ``= S`` says every
    change up to S is in base: true once no change file at or below S is live (a
    tiered plan may fold some units and not others), never after a merge of runs."""
    folds = [p for p in plans if p.kind != "minor"]
    unfolded: set[str] = set()
    if folds:
        unfolded = {
            str(r[0])
            for r in conn.execute(
                "SELECT w.partition_key FROM unnest(%s::text[], %s::bigint[]) AS w(partition_key, "
                "seq) WHERE EXISTS (SELECT 1 FROM data_file d WHERE d.table_id = %s "
                "AND d.partition_key = w.partition_key AND d.store = 'change' "
                "AND d.removed_snapshot IS NULL AND d.seq <= w.seq)",
                ([p.partition_key for p in folds], [p.to_seq for p in folds], plans[0].table_id),
            ).fetchall()
        }
    advancing = [p for p in folds if p.partition_key not in unfolded]
    if advancing:
        conn.execute(
            "WITH w AS (SELECT * FROM unnest(%s::text[], %s::bigint[]) AS w(partition_key, seq)), "
            "moved AS (UPDATE catalog_partition c SET max_merged_seq = w.seq, last_major_at = %s "
            "FROM w WHERE c.table_id = %s AND c.partition_key = w.partition_key "
            "RETURNING c.partition_key, w.seq) "
            "INSERT INTO partition_merge_history (table_id, partition_key, snapshot_id, "
            "max_merged_seq) SELECT %s, partition_key, %s, seq FROM moved",
            (
                [p.partition_key for p in advancing],
                [p.to_seq for p in advancing],
                now,
                plans[0].table_id,
                plans[0].table_id,
                snapshot_id,
            ),
        )
    moved = {p.plan_id for p in advancing}
    return {p.plan_id: p.to_seq if p.plan_id in moved else p.from_seq for p in plans}


def _summary(plan: _OpenPlan, result: PlanCommit, merged_to: int) -> dict[str, Any]:
    """One plan's part of its compaction snapshot's summary."""
    return {
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


def _record_snapshot(
    conn: Connection,
    table_id: int,
    snapshot_id: int,
    summaries: Sequence[Mapping[str, Any]],
    now: Any,
) -> None:
    """The snapshot row: one plan's summary as it always was, several plans' as a
    ``plans`` list of those (``plan_summaries`` reads either)."""
    summary = summaries[0] if len(summaries) == 1 else {"plans": list(summaries)}
    conn.execute(
        "INSERT INTO snapshot (table_id, snapshot_id, kind, created_at, summary) "
        "VALUES (%s, %s, 'compaction', %s, %s)",
        (table_id, snapshot_id, now, json.dumps(summary)),
    )


def plan_summaries(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-plan summaries of a compaction snapshot's ``summary``: itself when it
    is one plan's, its ``plans`` when several committed together."""
    plans = summary.get("plans")
    return list(plans) if plans is not None else [summary]


def _mark_committed(conn: Connection, plans: Sequence[_OpenPlan], snapshot_id: int) -> None:
    """Every task Prepared -> Committed, each plan through Committing to Committed:
    one statement for the tasks and one for the plans (per state they were in), their
    history rows with them, however many plans commit together."""
    tasks = [(task_id, attempt) for plan in plans for task_id, _, attempt, _, _ in plan.tasks]
    moved = move_tasks(
        conn,
        tasks,
        TaskState.PREPARED,
        TaskState.COMMITTED,
        by=Actor.COMMITTER,
        reason=f"snapshot {snapshot_id}",
    )
    if len(moved) != len(tasks):
        # Every task was locked and seen Prepared by this transaction: a bug, not weather.
        raise CommitError(f"tasks {sorted({t for t, _ in tasks} - moved)} did not move")
    by_state: dict[PlanState, list[int]] = {}
    for plan in plans:
        by_state.setdefault(plan.state, []).append(plan.plan_id)
    for state, plan_ids in by_state.items():
        committed = move_plans(
            conn,
            plan_ids,
            [state, PlanState.COMMITTING, PlanState.COMMITTED],
            by=Actor.COMMITTER,
            reasons=["all tasks prepared", "committed"],
            committed_snapshot=snapshot_id,
        )
        if len(committed) != len(plan_ids):
            raise CommitError(f"plans {sorted(set(plan_ids) - committed)} did not move")


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


def committable_plans(conn: Connection) -> list[list[int]]:
    """Plans whose every task is Prepared but which are not committed, table by
    table: what the committer's sweep commits (each table's in one transaction,
    ``commit_plans``) when a task-result event was lost."""
    rows = conn.execute(
        "SELECT p.table_id, p.plan_id FROM compaction_plan p WHERE p.state = ANY(%s) "
        "AND NOT EXISTS (SELECT 1 FROM compaction_task t WHERE t.plan_id = p.plan_id "
        "AND t.state <> %s) ORDER BY p.table_id, p.plan_id",
        (_COMMITTABLE_STATES, TaskState.PREPARED.value),
    ).fetchall()
    by_table: dict[int, list[int]] = {}
    for table_id, plan_id in rows:
        by_table.setdefault(int(table_id), []).append(int(plan_id))
    return list(by_table.values())


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
    name, table_id, partition, kind, snapshot_id, snapshot_summary, at = row
    summary = next(
        s for s in plan_summaries(snapshot_summary) if s.get("plan_id", plan_id) == plan_id
    )
    return _event(name, table_id, partition, plan_id, kind, snapshot_id, summary, at)


def _event(
    table: str,
    table_id: int,
    partition_key: str,
    plan_id: int,
    kind: str,
    snapshot_id: int,
    summary: Mapping[str, Any],
    committed_at: Any,
) -> CompactionEvent:
    """The event announcing a plan from its part of the snapshot's summary: made by
    the commit itself, or read back later (``compaction_event``)."""
    return CompactionEvent(
        table=table,
        table_id=table_id,
        partition_key=partition_key,
        plan_id=plan_id,
        kind=kind,  # type: ignore[arg-type]
        snapshot_id=snapshot_id,
        max_merged_seq=summary["max_merged_seq"],
        removed_files=summary["removed_files"],
        added_files=summary["added_files"],
        added_bytes=summary["added_bytes"],
        added_rows=summary["added_rows"],
        committed_at=committed_at,
    )
