"""The catalog's own history stays bounded by retention (issue 37, ``firn.catalog.pruning``):
a table committed to and compacted round after round keeps the same number of history
rows once retention applies, reads stay equal to the model at every kept snapshot, a
pruned snapshot reads as expired, and late events naming pruned rows are not errors."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

import firn
from firn.catalog.commits import record_empty_batch, stream_batch_seq
from firn.catalog.compactions import compaction_event
from firn.catalog.event_rows import commit_named, compaction_named
from firn.catalog.expiry import expire
from firn.errors import EventMismatchError
from firn.events.commits import CommitEvent, PartitionChange
from firn.model.commits import StreamBatch
from tests.integration.table_checks import catalog_conn

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("part", pa.string(), nullable=False),
        pa.field("v", pa.int64(), nullable=False),
    ]
)
PARTS = ("a", "b", "c")
HISTORY = {
    "snapshots": "SELECT count(*) FROM snapshot WHERE table_id = %(t)s",
    "plans": "SELECT count(*) FROM compaction_plan WHERE table_id = %(t)s",
    "tasks": "SELECT count(*) FROM compaction_task JOIN compaction_plan USING (plan_id) "
    "WHERE table_id = %(t)s",
    "transitions": "SELECT count(*) FROM state_transition s WHERE (s.machine = 'plan' AND "
    "s.entity_id IN (SELECT plan_id FROM compaction_plan WHERE table_id = %(t)s)) OR "
    "(s.machine = 'task' AND s.entity_id IN (SELECT task_id FROM compaction_task "
    "JOIN compaction_plan USING (plan_id) WHERE table_id = %(t)s))",
    "merge_history": "SELECT count(*) FROM partition_merge_history WHERE table_id = %(t)s",
    "files": "SELECT count(*) FROM data_file WHERE table_id = %(t)s",
}


def _counts(table: firn.Table) -> dict[str, int]:
    conn = catalog_conn(table)
    return {
        name: int(conn.execute(query, {"t": table.table_id}).fetchone()[0])  # type: ignore[index]
        for name, query in HISTORY.items()
    }


def _dangling_transitions(table: firn.Table) -> int:
    row = (
        catalog_conn(table)
        .execute(
            "SELECT count(*) FROM state_transition s WHERE (s.machine = 'plan' AND NOT EXISTS "
            "(SELECT 1 FROM compaction_plan p WHERE p.plan_id = s.entity_id)) OR (s.machine = "
            "'task' AND NOT EXISTS (SELECT 1 FROM compaction_task t WHERE t.task_id = s.entity_id))"
        )
        .fetchone()
    )
    assert row is not None
    return int(row[0])


def _round(table: firn.Table, model: dict[int, tuple[str, int]], rng: random.Random) -> None:
    """Three commits (upserts and deletes over a few partitions), then a compaction."""
    for _ in range(3):
        keys = rng.sample(range(200), 30)
        upserts = keys[:20]
        rows = [{"k": k, "part": PARTS[k % 3], "v": rng.randrange(1000)} for k in upserts]
        table.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
        model.update({r["k"]: (r["part"], r["v"]) for r in rows})
        gone = [k for k in keys[20:] if k in model]
        if gone:
            table.delete(
                pa.Table.from_pylist(
                    [{"k": k, "part": model[k][0]} for k in gone],
                    schema=pa.schema([SCHEMA.field("k"), SCHEMA.field("part")]),
                )
            )
            for k in gone:
                del model[k]
    summary = firn.compact(table, kind="major", engine="local")
    assert summary["failed_attempts"] == 0, summary["errors"]


def _view(table: firn.Table, snapshot: int | None = None) -> dict[int, tuple[str, int]]:
    return {r["k"]: (r["part"], r["v"]) for r in table.read(snapshot=snapshot).to_pylist()}


def test_history_stays_bounded_round_after_round_and_reads_stay_right(
    shared_catalog: firn.Catalog,
) -> None:
    table = shared_catalog.create_table(
        "pruned",
        SCHEMA,
        ["part", "k"],
        ["part"],
        {"base.buckets": 2, "change.buckets": 2, "snapshot.retention": "1h"},
    )
    conn = catalog_conn(table)
    rng = random.Random(37)
    model: dict[int, tuple[str, int]] = {}
    counts: list[dict[str, int]] = []
    for n in range(8):
        _round(table, model, rng)
        # Two hours pass for everything before the compaction's snapshot, which is
        # then the oldest within the retention (1 hour) once the next commit lands.
        pinned, pinned_view = table.current_snapshot(), _view(table)
        table.upsert(pa.Table.from_pylist([{"k": 500 + n, "part": "a", "v": n}], schema=SCHEMA))
        model[500 + n] = ("a", n)
        conn.execute(
            "UPDATE snapshot SET created_at = created_at - interval '2 hours' "
            "WHERE table_id = %s AND snapshot_id < %s",
            (table.table_id, pinned),
        )
        conn.execute(
            "UPDATE compaction_plan SET updated_at = updated_at - interval '2 hours' "
            "WHERE table_id = %s AND committed_snapshot < %s",
            (table.table_id, pinned),
        )
        dry = expire(conn, table.name, dry_run=True, list_storage=False).tables[0]
        done = expire(conn, table.name, list_storage=False).tables[0]
        assert dry.history == done.history, "a dry run counts exactly what a run deletes"
        assert _view(table) == model
        assert done.keep_from == pinned
        assert _view(table, pinned) == pinned_view, "the oldest kept snapshot reads as it did"
        assert _dangling_transitions(table) == 0
        counts.append(_counts(table))
        if n > 0:
            assert done.history.rows > 0, f"round {n} pruned nothing: {done.history}"
            assert done.history.snapshots >= 3, "each round's commits' snapshots go"

    # Every round adds the same work, and retention takes the same away again.
    steady = ("plans", "tasks", "transitions", "merge_history")
    assert [c[name] for c in counts[3:] for name in steady] == [
        counts[3][name] for _ in counts[3:] for name in steady
    ], counts
    # Snapshot rows follow the live files (a base file keeps the snapshot that wrote
    # it), not the rounds: beyond those, only the kept ones and what plans name.
    for c in counts:
        assert c["snapshots"] <= c["files"] + 2 * len(PARTS) + 2, counts
    assert counts[-1]["plans"] <= len(PARTS), "the newest committed plan of each partition"
    with pytest.raises(firn.SnapshotExpiredError, match=r"snapshot 2 .* expired"):
        table.read(snapshot=2)
    with pytest.raises(firn.ConfigError, match="has no snapshot"):
        table.read(snapshot=table.current_snapshot() + 1)
    again = expire(conn, table.name, list_storage=False).tables[0]
    assert again.history.rows == 0


def test_late_events_naming_pruned_rows_are_not_errors_and_forged_ones_still_are(
    shared_catalog: firn.Catalog,
) -> None:
    table = shared_catalog.create_table(
        "late", SCHEMA, ["part", "k"], ["part"], {"snapshot.retention": 0, "base.buckets": 1}
    )
    conn = catalog_conn(table)
    row = pa.Table.from_pylist([{"k": 1, "part": "a", "v": 1}], schema=SCHEMA)
    seq = table.upsert(row)
    first_snapshot = table.current_snapshot()
    firn.compact(table, kind="major", engine="local")
    compaction = compaction_event(conn, _newest_plan(table))
    assert compaction is not None
    table.upsert(row)
    firn.compact(table, kind="major", engine="local")
    expire(conn, table.name, list_storage=False)
    assert conn.execute(
        "SELECT count(*) FROM snapshot WHERE table_id = %s AND snapshot_id = %s",
        (table.table_id, first_snapshot),
    ).fetchone() == (0,)
    assert conn.execute(
        "SELECT count(*) FROM compaction_plan WHERE plan_id = %s", (compaction.plan_id,)
    ).fetchone() == (0,)

    change = PartitionChange(
        partition_key="part=a",
        partition_values={"part": "a"},
        insert_files=1,
        delete_files=0,
        insert_rows=1,
        delete_rows=0,
        insert_bytes=1,
        delete_bytes=0,
    )
    commit = CommitEvent(
        table=table.name,
        table_id=table.table_id,
        snapshot_id=first_snapshot,
        seq=int(seq),
        partitions=[change],
        committed_at=dt.datetime.now(dt.UTC),
    )
    assert commit_named(conn, commit) == []
    compaction_named(conn, compaction)  # pruned, not forged: no error

    forged = commit.model_copy(update={"snapshot_id": table.current_snapshot() + 5})
    with pytest.raises(EventMismatchError, match="does not exist"):
        commit_named(conn, forged)
    with pytest.raises(EventMismatchError, match="does not exist"):
        compaction_named(conn, compaction.model_copy(update={"plan_id": 10**9}))


def _newest_plan(table: firn.Table) -> int:
    row = (
        catalog_conn(table)
        .execute(
            "SELECT max(plan_id) FROM compaction_plan WHERE table_id = %s AND state = 'Committed'",
            (table.table_id,),
        )
        .fetchone()
    )
    assert row is not None
    return int(row[0])


def test_only_each_stream_querys_newest_batch_record_outlives_retention(
    shared_catalog: firn.Catalog,
) -> None:
    table = shared_catalog.create_table(
        "streamed", SCHEMA, ["part", "k"], ["part"], {"snapshot.retention": 0}
    )
    conn = catalog_conn(table)
    for query in ("q1", "q2"):
        for batch in range(3):
            record_empty_batch(conn, table.table_id, StreamBatch(query, batch))
    dry = expire(conn, table.name, dry_run=True, list_storage=False).tables[0]
    done = expire(conn, table.name, list_storage=False).tables[0]
    assert dry.history.stream_batches == done.history.stream_batches == 4
    left = conn.execute(
        "SELECT query_id, batch_id FROM stream_batch WHERE table_id = %s ORDER BY query_id",
        (table.table_id,),
    ).fetchall()
    assert left == [("q1", 2), ("q2", 2)]
    # A replay of the newest batch is still recognised as done.
    assert stream_batch_seq(conn, table.table_id, StreamBatch("q1", 2)) == 0
