"""The metrics service's periodic check reads what changed (issue 37): change stamps
on partition rows (migration 0015) for commits, loads and every compaction commit,
and on table rows for property and schema changes; partitions with unmerged changes
always (their time triggers move by themselves). Its query uses indexes only, on a
catalog of 10^5 partitions generated in SQL (a plan, not a timing)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import firn
from firn.catalog import metrics
from firn.catalog.fleet import BACKLOG
from firn.catalog.metrics import (
    TableRead,
    change_stamp,
    changed_partitions,
    partition_states,
    partition_states_of,
)
from firn.postgres.connection import Connection

SCHEMA = pa.schema(
    [pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False)]
)


def _rows(parts: list[str], k: int) -> pa.Table:
    return pa.table({"p": parts, "k": [k] * len(parts)}, schema=SCHEMA)


def test_changes_are_stamped_and_read_after_the_stamp(
    shared_catalog: firn.Catalog, db: Connection, unique: str
) -> None:
    table = shared_catalog.create_table(f"t_{unique}", SCHEMA, ["p", "k"], ["p"])
    other = shared_catalog.create_table(f"o_{unique}", SCHEMA, ["p", "k"], ["p"])
    table.upsert(_rows(["a", "b", "c"], 1))
    other.upsert(_rows(["a"], 1))
    for t in (table, other):
        firn.compact(t, kind="major", engine="local")
    stamp = change_stamp(db)
    assert changed_partitions(db, stamp).partitions == {}  # all folded, nothing since
    table.upsert(_rows(["a"], 2))
    seen = changed_partitions(db, stamp)
    assert seen.partitions == {table.table_id: {"p=a"}}
    assert seen.high_water > stamp
    firn.compact(table, kind="major", engine="local")  # folds a: stamped, not unmerged
    after = changed_partitions(db, seen.high_water)
    assert after.partitions == {table.table_id: {"p=a"}}
    assert changed_partitions(db, after.high_water).partitions == {}
    other.set_properties({"major.file-count": 3})  # every partition of the table
    props = changed_partitions(db, after.high_water)
    assert props.partitions == {other.table_id: None}
    unmerged = change_stamp(db)
    table.upsert(_rows(["b"], 3))  # stays unmerged: read at every check until folded
    assert changed_partitions(db, change_stamp(db)).partitions == {table.table_id: {"p=b"}}
    assert changed_partitions(db, unmerged).partitions == {table.table_id: {"p=b"}}


def test_the_check_query_uses_indexes_on_a_large_catalog(
    shared_catalog: firn.Catalog, db: Connection
) -> None:
    db.execute(
        "INSERT INTO catalog_table (table_id, name, schema_ipc, primary_key, partition_by, "
        "properties, location) SELECT 1000000 + g, 'gen_' || g, '\\x00', '{k}', '{p}', '{}', "
        "'/nowhere' FROM generate_series(1, 1000) g"
    )
    db.execute(
        "INSERT INTO catalog_partition (table_id, partition_key, partition_values, max_seq, "
        "max_merged_seq) SELECT 1000000 + t, 'p=' || p, '{}', 5, CASE WHEN p = 1 AND t % 100 = 0 "
        "THEN 4 ELSE 5 END FROM generate_series(1, 1000) t, generate_series(1, 100) p"
    )
    db.execute("ANALYZE catalog_partition")
    db.execute("ANALYZE catalog_table")
    stamp = change_stamp(db)
    plan = "\n".join(
        str(row[0])
        for row in db.execute(
            "EXPLAIN SELECT table_id, partition_key, changed FROM catalog_partition "
            "WHERE changed > %(since)s OR max_seq > max_merged_seq "
            "UNION ALL SELECT table_id, NULL, definition_changed FROM catalog_table "
            "WHERE definition_changed > %(since)s",
            {"since": stamp},
        ).fetchall()
    )
    assert "Seq Scan on catalog_partition" not in plan, plan
    assert "Seq Scan on catalog_table" not in plan, plan
    found = changed_partitions(db, stamp)
    assert sum(len(keys or ()) for keys in found.partitions.values()) == 10  # the unmerged

    # `firn status --fleet` finds the backlog the same way.
    plan = "\n".join(str(row[0]) for row in db.execute("EXPLAIN " + BACKLOG).fetchall())
    assert "Seq Scan on catalog_partition" not in plan, plan
    assert "Seq Scan on data_file" not in plan, plan


def test_many_tables_read_in_one_statement_agree_with_one_table_at_a_time(
    shared_catalog: firn.Catalog, db: Connection, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``partition_states_of`` (the periodic check, ``firn status --fleet``) gives each
    table what ``partition_states`` gives it alone: whole tables and tables read in
    part, over several statements (two tables a statement here), each table with its
    own thresholds (a small-file limit that counts its base files as small or not)."""
    tables = []
    for n in range(5):
        props = {"small-file-bytes": "1"} if n % 2 == 0 else {}
        table = shared_catalog.create_table(f"m{n}_{unique}", SCHEMA, ["p", "k"], ["p"], props)
        table.upsert(_rows(["a", "b", "c"][: n % 3 + 1], n))
        firn.compact(table, kind="major", engine="local")
        table.upsert(_rows(["a"], n + 10))
        tables.append(table)
    monkeypatch.setattr(metrics, "STATES_PER_QUERY", 2)
    reads = [
        TableRead(t.table_id, t.properties, None if n % 2 else ["p=a", "p=c"])
        for n, t in enumerate(tables)
    ]
    alone = {
        r.table_id: partition_states(db, r.table_id, r.properties, r.partition_keys) for r in reads
    }
    together = partition_states_of(db, reads)
    assert together == alone
    small = {
        n: {key: s.metrics.small_files for key, s in together[t.table_id].items()}
        for n, t in enumerate(tables)
    }
    # Tables 0, 2, 4: only p=a and p=c asked for; a 1-byte limit: only the change is small.
    # Tables 1, 3: every partition; the default limit: the base file is small too.
    assert small == {
        0: {"p=a": 1},
        1: {"p=a": 2, "p=b": 1},
        2: {"p=a": 1, "p=c": 0},
        3: {"p=a": 2},
        4: {"p=a": 1},
    }
