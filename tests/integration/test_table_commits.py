"""Producer commits on the real catalog and storage: files, seqs, snapshots, reads."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import firn
from firn.errors import ConfigError
from firn.events.schemas import validate
from firn.kafka.topics import Topics, ensure_topics
from firn.model.commits import CommitResult
from firn.model.keyhash import hash_keys
from firn.settings import FirnSettings
from tests.hash_tree import HASH_TREE
from tests.waiting import messages_on

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("amount", pa.float64()),
        pa.field("note", pa.string()),
    ]
)


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as cat:
        yield cat


def changes(rows: list[tuple[str, str, int, float | None, str | None]]) -> pa.Table:
    ops, regions, ids, amounts, notes = (list(c) for c in zip(*rows, strict=True))
    return pa.table(
        {"region": regions, "id": ids, "amount": amounts, "note": notes, "_op": ops},
    )


def sorted_rows(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda r: (r["region"], r["id"]))


def test_commit_writes_files_per_partition_node_and_type(catalog: firn.Catalog) -> None:
    table = catalog.create_table(
        "orders", SCHEMA, ["region", "id"], ["region"], {"change.buckets": 2, **HASH_TREE}
    )
    seq = table.commit(
        changes(
            [
                ("U", "eu", 1, 1.0, "a"),
                ("U", "eu", 2, 2.0, None),
                ("D", "us", 3, None, None),
                ("U", "us", 4, 4.0, "d"),
                ("U", "eu", 3, 3.0, "c"),
            ]
        )
    )
    assert seq == 1
    files = table.files().to_pylist()
    assert {f["store"] for f in files} == {"change"}
    assert {(f["partition"], f["type"]) for f in files} == {
        ("region=eu", "I"),
        ("region=us", "D"),
        ("region=us", "I"),
    }
    assert sum(f["records"] for f in files) == 5
    assert all(f["seq"] == 1 and f["node_m"] == 2 for f in files)
    for f in files:
        data = table.storage.read_parquet(f["path"])
        keys = [data.column("region"), data.column("id")]
        assert set((hash_keys(keys) % 2).tolist()) == {f["node_i"]}
        if f["type"] == "D":
            assert data.column_names == ["region", "id", "_ord"]
        assert data.column("id").to_pylist() == sorted(data.column("id").to_pylist())
    assert sorted_rows(table.read()) == [
        {"region": "eu", "id": 1, "amount": 1.0, "note": "a"},
        {"region": "eu", "id": 2, "amount": 2.0, "note": None},
        {"region": "eu", "id": 3, "amount": 3.0, "note": "c"},
        {"region": "us", "id": 4, "amount": 4.0, "note": "d"},
    ]


def test_seqs_snapshots_and_pinned_reads(catalog: firn.Catalog) -> None:
    table = catalog.create_table("orders", SCHEMA, ["region", "id"], ["region"])
    assert table.current_snapshot() == 0
    assert table.read().num_rows == 0
    first = table.upsert(
        pa.table({"region": ["eu", "eu"], "id": [1, 2], "amount": [1.0, 2.0], "note": ["a", "b"]})
    )
    pinned = table.current_snapshot()
    second = table.delete(pa.table({"region": ["eu"], "id": [1]}))
    third = table.upsert(
        pa.table({"region": ["eu"], "id": [2], "amount": [20.0], "note": [None]}),
    )
    assert (first, second, third) == (1, 2, 3)
    assert sorted_rows(table.read(snapshot=pinned)) == [
        {"region": "eu", "id": 1, "amount": 1.0, "note": "a"},
        {"region": "eu", "id": 2, "amount": 2.0, "note": "b"},
    ]
    assert table.read().to_pylist() == [{"region": "eu", "id": 2, "amount": 20.0, "note": None}]
    status = table.status()
    assert (status["seq"], status["snapshot"]) == (3, 3)
    (part,) = status["partitions"]
    assert part["partition"] == "region=eu"
    assert (part["max_merged_seq"], part["max_seq"]) == (0, 3)
    assert part["unmerged_files"] == table.files().num_rows
    assert part["unmerged_bytes"] == sum(f["size"] for f in table.files().to_pylist())
    with pytest.raises(ConfigError, match="no snapshot 99"):
        table.read(snapshot=99)
    reopened = catalog.table("orders")
    assert sorted_rows(reopened.read()) == sorted_rows(table.read())


def _catalog_counts(catalog: firn.Catalog) -> tuple[int, ...]:
    row = catalog.conn.execute(
        "SELECT (SELECT count(*) FROM data_file), (SELECT count(*) FROM snapshot), "
        "(SELECT count(*) FROM catalog_partition), (SELECT max(last_seq) FROM catalog_table)"
    ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (pa.table({"region": ["eu"], "id": [1], "amount": [1.0], "note": ["x"]}), "_op"),
        (
            pa.table(
                {"region": ["eu"], "id": [None], "amount": [1.0], "note": ["x"], "_op": ["U"]}
            ),
            "key column 'id' has nulls",
        ),
        (
            pa.table({"region": ["eu"], "id": [1], "amount": [1.0], "note": ["x"], "_op": ["X"]}),
            "unknown '_op'",
        ),
        (
            pa.table({"region": ["eu"], "id": ["a"], "amount": [1.0], "note": ["x"], "_op": ["U"]}),
            "column 'id' has type string, which is not the table's int64",
        ),
        (
            pa.table({"region": [None], "id": [1], "amount": [None], "note": [None], "_op": ["D"]}),
            "key column 'region' has nulls",
        ),
        (
            pa.table(
                {
                    "region": pa.array([], pa.string()),
                    "id": pa.array([], pa.int64()),
                    "amount": pa.array([], pa.float64()),
                    "note": pa.array([], pa.string()),
                    "_op": pa.array([], pa.string()),
                }
            ),
            "empty",
        ),
    ],
)
def test_bad_change_sets_write_nothing(
    catalog: firn.Catalog, tmp_path: Path, bad: pa.Table, message: str
) -> None:
    table = catalog.create_table("orders", SCHEMA, ["region", "id"], ["region"])
    table.upsert(pa.table({"region": ["eu"], "id": [1], "amount": [1.0], "note": ["a"]}))
    before = _catalog_counts(catalog), sorted(p.name for p in tmp_path.rglob("*.parquet"))
    with pytest.raises(ConfigError, match=message):
        table.commit(bad)
    after = _catalog_counts(catalog), sorted(p.name for p in tmp_path.rglob("*.parquet"))
    assert after == before


def test_delete_needs_the_key_and_unkeyed_tables_only_append(catalog: firn.Catalog) -> None:
    keyed = catalog.create_table("orders", SCHEMA, ["region", "id"], ["region"])
    with pytest.raises(ConfigError, match="key columns"):
        keyed.delete(pa.table({"id": [1]}))
    log = catalog.create_table("log", SCHEMA, [])
    log.upsert(
        pa.table({"region": ["eu", "eu"], "id": [1, 1], "amount": [1.0, 2.0], "note": [None, None]})
    )
    assert log.read().num_rows == 2
    with pytest.raises(ConfigError, match="only takes upserts"):
        log.commit(changes([("D", "eu", 1, None, None)]))


def test_failed_catalog_transaction_leaves_no_files(catalog: firn.Catalog, tmp_path: Path) -> None:
    table = catalog.create_table("orders", SCHEMA, ["region", "id"], ["region"])
    # A trigger that refuses the next data file makes the commit transaction fail
    # after every change file was written.
    catalog.conn.execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by test'; END $$"
    )
    catalog.conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON data_file FOR EACH ROW EXECUTE FUNCTION refuse()"
    )
    with pytest.raises(firn.CommitError, match="refused by test"):
        table.upsert(
            pa.table(
                {"region": ["eu", "us"], "id": [1, 2], "amount": [1.0, 2.0], "note": ["a", "b"]}
            )
        )
    assert list(tmp_path.rglob("*.parquet")) == []
    assert _catalog_counts(catalog)[:3] == (0, 0, 0)
    assert table.current_snapshot() == 0


def test_commit_event_reaches_the_commits_topic(
    catalog: firn.Catalog, settings: FirnSettings
) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, (topics.commits,), partitions=1)
    table = catalog.create_table("orders", SCHEMA, ["region", "id"], ["region"])
    began = time.perf_counter()
    seq = table.commit(changes([("U", "eu", 1, 1.0, "a"), ("D", "us", 2, None, None)]))
    took = time.perf_counter() - began
    assert table.last_event_delivered is True
    # The commit's time broken down, each step once, in order, within the whole.
    assert list(seq.phases) == [
        "validate", "split", "stage", "write", "register", "announce", "back_pressure"
    ]  # fmt: skip
    assert all(t >= 0 for t in seq.phases.values())
    assert 0 < sum(seq.phases.values()) <= took
    read = messages_on(settings, topics.commits, f"{settings.topic_prefix}reader", expect=1)
    assert read, "the commit event was published"
    message = read[0]
    assert message.key() == b"orders"
    event = json.loads(message.value())
    validate(event)
    assert (event["event_type"], event["schema_version"], event["seq"]) == ("commit", 1, seq)
    assert {
        p["partition_key"]: (p["insert_rows"], p["delete_rows"]) for p in event["partitions"]
    } == {
        "region=eu": (1, 0),
        "region=us": (0, 1),
    }


def test_unreachable_kafka_does_not_undo_or_block_the_commit(
    settings: FirnSettings, tmp_path: Path
) -> None:
    with psycopg.connect(settings.database_dsn()):
        pass  # the catalog is reachable; only Kafka is not
    dead = settings.model_copy(
        update={"kafka_bootstrap": "127.0.0.1:9", "commit_event_timeout_seconds": 0.5}
    )
    with firn.connect(warehouse=str(tmp_path), settings=dead) as catalog:
        table = catalog.create_table("orders", SCHEMA, ["region", "id"], ["region"])
        seq = table.upsert(pa.table({"region": ["eu"], "id": [1], "amount": [1.0], "note": ["a"]}))
        assert seq == 1
        assert table.last_event_delivered is False
        assert table.read().num_rows == 1


def test_a_commit_reports_back_pressure_until_compaction_catches_up(
    catalog: firn.Catalog,
) -> None:
    table = catalog.create_table(
        "stalling",
        SCHEMA,
        ["region", "id"],
        ["region"],
        {"change.buckets": 1, "base.buckets": 1, "write.stall-runs": 3},
    )
    eu = changes([("U", "eu", 1, 1.0, None), ("D", "eu", 2, None, None)])
    assert [table.commit(eu).stalled for _ in range(2)] == [False, False]
    third = table.commit(eu)
    assert [(s.partition_key, s.node, s.runs) for s in third.stalls] == [("region=eu", "(1,0)", 3)]
    firn.compact(table, engine="local")
    assert not table.commit(eu).stalled, "compacted: one run left"
    assert table.read().num_rows == 1


def test_small_partitions_of_a_commit_go_to_their_root_and_count_as_runs_of_every_node(
    catalog: firn.Catalog,
) -> None:
    table = catalog.create_table(
        "split",
        SCHEMA,
        ["region", "id"],
        ["region"],
        {"change.buckets": 4, "change.split-rows": 10, "write.stall-runs": 3},
    )
    small = changes(
        [("U", "eu", i, float(i), None) for i in range(5)] + [("D", "us", 1, None, None)]
    )
    first = table.commit(small)
    assert not first.stalled
    files = table.files().to_pylist()
    assert sorted((f["partition"], f["type"], f["node_m"]) for f in files) == [
        ("region=eu", "I", 1),
        ("region=us", "D", 1),
    ]
    assert not table.commit(small).stalled
    # 20 rows of eu split by node: each node's reads merge its own run and the
    # root's two, so the busiest node has three runs.
    third = table.commit(changes([("U", "eu", i, -1.0, "big") for i in range(20)]))
    assert {f["node_m"] for f in table.files().to_pylist() if f["added_snapshot"] == 3} == {4}
    assert [(s.partition_key, s.runs) for s in third.stalls] == [("region=eu", 3)]
    (eu,) = [p for p in table.status()["partitions"] if p["partition"] == "region=eu"]
    assert eu["max_runs_per_node"] == 3
    assert sorted_rows(table.read()) == [
        {"region": "eu", "id": i, "amount": -1.0, "note": "big"} for i in range(20)
    ]
    firn.compact(table, engine="local")
    assert sorted_rows(table.read()) == [
        {"region": "eu", "id": i, "amount": -1.0, "note": "big"} for i in range(20)
    ]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4, 8]),  # change.buckets for this commit
            st.lists(
                st.tuples(st.sampled_from(["eu", "us", "ap"]), st.integers(0, 60)),
                min_size=1,
                max_size=40,
            ),
            st.booleans(),  # a major compaction after it
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_runs_a_commit_registers_with_are_the_busiest_nodes_of_its_partitions(
    catalog: firn.Catalog, steps: list[tuple[int, list[tuple[str, int]], bool]]
) -> None:
    """The back-pressure look a commit's registration takes in SQL (migration 0021)
    is ``busiest_nodes``'s: over tree levels (change.buckets changed between
    commits), root-level small partitions, ancestors' runs and compacted ones."""
    table = catalog.create_table(
        f"runs_{uuid.uuid4().hex[:8]}",
        SCHEMA,
        ["region", "id"],
        ["region"],
        {"change.split-rows": 8, "write.stall-runs": 2},
    )
    registered: list[CommitResult] = []
    register = table.catalog.register_commit

    def spied(*args: Any, **kwargs: Any) -> CommitResult:
        registered.append(register(*args, **kwargs))
        return registered[-1]

    table.catalog.register_commit = spied  # type: ignore[method-assign]
    for buckets, rows, compact in steps:
        table.set_properties({"change.buckets": buckets})
        keys = sorted(set(rows))
        table.commit(changes([("U", region, i, float(i), None) for region, i in keys]))
        written = sorted({region for region, _ in keys})
        expected = table.catalog.busiest_nodes(table.table_id, [f"region={r}" for r in written])
        assert registered[-1].busiest == expected
        if compact:
            firn.compact(table, kind="major", engine="local")
