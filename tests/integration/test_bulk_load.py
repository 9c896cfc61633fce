"""``Table.load``: whole partitions replaced by base files in one snapshot, checked
against the reference model through commits, loads and compactions; failures and
bad input leave nothing behind; a compaction racing a load cannot commit over it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import firn
from firn.errors import CommitError, ConfigError
from firn.model.keyhash import hash_keys, node_index
from firn.settings import FirnSettings
from tests.changesets import (
    KEY_KINDS,
    PARTS,
    KeyKind,
    ReferenceModel,
    Row,
    as_change_set,
    as_view,
    key_of,
    operations,
    table_schema,
)

_names = itertools.count()
SCHEMA = table_schema(KEY_KINDS[0])


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(tmp_path / "wh"), settings=settings) as catalog:
        yield catalog


def new_table(catalog: firn.Catalog, *, partitioned: bool = True, **props: Any) -> firn.Table:
    properties = {"change.buckets": 2, "base.buckets": 4, **props}
    return catalog.create_table(
        f"load_{next(_names)}", SCHEMA, ["part", "k"], ["part"] if partitioned else [], properties
    )


def load_rows(keys: list[tuple[str, int]], label: str = "x") -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"part": p, "k": k, "qty": k * 10, "label": f"{label}{k}", "price": k / 2}
            for p, k in keys
        ],
        schema=SCHEMA,
    )


def stored(table: firn.Table) -> set[str]:
    return {f.path for f in table.storage.walk()}


def recorded(table: firn.Table) -> set[str]:
    found = table.catalog.conn.execute(  # type: ignore[attr-defined]
        "SELECT path FROM orphan_file WHERE table_id = %s", (table.table_id,)
    ).fetchall()
    return {p for (p,) in found}


def apply_load(model: ReferenceModel, rows: list[Row], partitions: list[str] | None) -> None:
    """What a load does to the model: the replaced partitions hold exactly ``rows``."""
    for key in list(model.rows):
        if partitions is None or key[0] in partitions:
            del model.rows[key]
    for row in rows:
        model.rows[key_of(row)] = dict(row)


def test_a_load_into_an_empty_table_writes_sorted_base_files_at_the_base_level(
    catalog: firn.Catalog,
) -> None:
    table = new_table(catalog, **{"target-file-size": "4KiB"})
    keys = [(p, k) for p in PARTS for k in range(3000, 0, -1)]  # reverse order on purpose
    seq = table.load(load_rows(keys))
    assert seq == 1
    assert as_view(table.read()) == as_view(load_rows(keys))
    files = table.files()
    assert set(files.column("store").to_pylist()) == {"base"}
    assert set(files.column("node_m").to_pylist()) == {4}
    assert set(files.column("seq").to_pylist()) == {seq}
    assert files.num_rows > len(PARTS) * 4, "cut at the target size"
    for path, m, i in zip(
        files.column("path").to_pylist(),
        files.column("node_m").to_pylist(),
        files.column("node_i").to_pylist(),
        strict=True,
    ):
        rows = table.storage.read_parquet(path)
        ks = rows.column("k").to_pylist()
        assert ks == sorted(ks), "key order inside each file"
        nodes = node_index(hash_keys([rows.column("part"), rows.column("k")]), m)
        assert set(nodes.tolist()) == {i}, "every row in its file's node"
    status = table.status()
    assert all(p["max_merged_seq"] == seq for p in status["partitions"])
    assert recorded(table) == set(), "the staged directory's record is cleared"
    # Nothing is left to compact, and changes apply on top of the load.
    assert firn.compact(table, engine="local")["plans"] == []
    table.delete(pa.table({"part": ["a"], "k": [5]}))
    table.upsert(load_rows([("b", 7)], label="new"))
    view = as_view(load_rows(keys))
    del view[("a", 5)]
    view[("b", 7)] = load_rows([("b", 7)], label="new").to_pylist()[0]
    assert as_view(table.read()) == view
    firn.compact(table, engine="local")
    assert as_view(table.read()) == view


def codecs(table: firn.Table, paths: list[str]) -> set[str]:
    """The Parquet codecs of the files at ``paths`` (relative to the table)."""
    found = set()
    for path in paths:
        with table.storage.fs.open_input_file(table.storage.full_path(path)) as f:
            footer = pq.ParquetFile(f).metadata
        found |= {footer.row_group(0).column(c).compression for c in range(len(SCHEMA))}
    return found


def inserts(table: firn.Table) -> list[str]:
    """The paths of the table's live insert (upsert) change files."""
    files = table.files()
    return [
        p
        for p, t in zip(
            files.column("path").to_pylist(), files.column("type").to_pylist(), strict=True
        )
        if t == "I"
    ]


def test_files_are_written_with_the_tables_codec_and_a_change_applies_to_new_files(
    catalog: firn.Catalog,
) -> None:
    table = new_table(catalog)
    keys = [(p, k) for p in PARTS for k in range(200)]
    table.load(load_rows(keys))
    loaded = table.files().column("path").to_pylist()
    assert codecs(table, loaded) == {"LZ4"}, "file.compression defaults to lz4 (LZ4_RAW)"
    table.upsert(load_rows(keys[:4], label="early"))
    inserts_before = inserts(table)
    assert codecs(table, inserts_before) == {"LZ4"}, "change files take the table's codec"

    table.set_properties({"file.compression": "zstd"})
    table.upsert(load_rows(keys[::3], label="again"))
    later = sorted(set(inserts(table)) - set(inserts_before))
    assert later
    assert codecs(table, later) == {"SNAPPY"}, "a zstd table's small change files are snappy"
    firn.compact(table, kind="full", engine="local")
    rewritten = table.files().column("path").to_pylist()
    assert not set(rewritten) & set(loaded)
    assert codecs(table, rewritten) == {"ZSTD"}, "compaction writes the table's codec"
    view = as_view(load_rows(keys))
    view.update(as_view(load_rows(keys[:4], label="early")))
    view.update(as_view(load_rows(keys[::3], label="again")))
    assert as_view(table.read()) == view

    with pytest.raises(ConfigError, match=r"file\.compression"):
        table.set_properties({"file.compression": "gzip"})


def test_a_load_replaces_only_the_named_partitions(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    table.upsert(load_rows([(p, k) for p in PARTS for k in range(10)], label="old"))
    table.delete(pa.table({"part": ["a"], "k": [3]}))
    before = table.current_snapshot()
    old = as_view(table.read())
    seq = table.load(
        load_rows([("a", 100), ("c", 7)], label="new"), partitions=["part=a", {"part": "c"}]
    )
    view = {k: v for k, v in old.items() if k[0] == "b"}
    view.update(as_view(load_rows([("a", 100), ("c", 7)], label="new")))
    assert as_view(table.read()) == view
    assert as_view(table.read(snapshot=before)) == old, "the snapshot before still reads"
    live = table.files()
    assert set(pc.unique(live.column("partition")).to_pylist()) == {"part=a", "part=b", "part=c"}
    replaced = live.filter(pc.not_equal(live.column("partition"), "part=b"))
    assert set(replaced.column("store").to_pylist()) == {"base"}
    assert set(replaced.column("seq").to_pylist()) == {seq}
    # A partition named but absent from the rows ends up empty; the whole table too.
    table.load(load_rows([("a", 1)]), partitions=["part=a", "part=b"])
    assert as_view(table.read()) == {
        **as_view(load_rows([("a", 1)])),
        **as_view(load_rows([("c", 7)], label="new")),
    }
    table.load(load_rows([]))
    assert table.read().num_rows == 0
    assert table.files().num_rows == 0


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[KeyKind, bool, list[tuple[str, Any]]]:
    kind = draw(st.sampled_from(KEY_KINDS))
    partitioned = draw(st.booleans())
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(2, 7))):
        action = draw(st.sampled_from(["commit", "commit", "load", "compact"]))
        if action == "commit":
            steps.append(("commit", draw(operations(kind))))
        elif action == "compact":
            steps.append(("compact", draw(st.sampled_from(["major", "minor", "full"]))))
        else:
            numbers = draw(st.lists(st.integers(0, 15), max_size=10, unique=True))
            parts = draw(st.lists(st.sampled_from(PARTS), min_size=1, max_size=3, unique=True))
            rows = [
                {
                    "part": draw(st.sampled_from(parts)),
                    "k": kind.value(n),
                    "qty": draw(st.none() | st.integers(0, 99)),
                    "label": draw(st.none() | st.text(max_size=4)),
                    "price": None,
                }
                for n in numbers
            ]
            named = None if not partitioned or draw(st.booleans()) else parts
            steps.append(("load", (rows, named)))
    return kind, partitioned, steps


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_commits_loads_and_compactions_read_as_the_model(
    catalog: firn.Catalog, scenario: tuple[KeyKind, bool, list[tuple[str, Any]]]
) -> None:
    kind, partitioned, steps = scenario
    schema = table_schema(kind)
    table = catalog.create_table(
        f"load_model_{next(_names)}",
        schema,
        ["part", "k"],
        ["part"] if partitioned else [],
        {"change.buckets": 2, "base.buckets": 2},
    )
    model = ReferenceModel()
    for action, arg in steps:
        if action == "commit":
            table.commit(as_change_set(arg, schema))
            model.apply(arg)
        elif action == "load":
            rows, named = arg
            if named is None:
                table.load(pa.Table.from_pylist(rows, schema=schema))
            else:
                table.load(
                    pa.Table.from_pylist(rows, schema=schema),
                    partitions=[f"part={p}" for p in named],
                )
            apply_load(model, rows, named)
        else:
            firn.compact(table, kind=arg, engine="local")
        assert as_view(table.read()) == model.view(), f"after {action}"


def test_a_load_that_fails_while_writing_leaves_no_file(
    catalog: firn.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import firn.engine.loading as loading

    table = new_table(catalog)
    table.upsert(load_rows([("a", 1)]))
    before, snapshot = stored(table), table.current_snapshot()
    real = loading.write_sorted
    calls = itertools.count()

    def fail_on_the_third(*args: Any, **kwargs: Any) -> Any:
        files = real(*args, **kwargs)
        if next(calls) == 2:
            raise OSError("disk full")
        return files

    monkeypatch.setattr(loading, "write_sorted", fail_on_the_third)
    with pytest.raises(OSError, match="disk full"):
        table.load(load_rows([(p, k) for p in PARTS for k in range(50)]))
    assert stored(table) == before
    assert recorded(table) == set()
    assert table.current_snapshot() == snapshot
    assert as_view(table.read()) == as_view(load_rows([("a", 1)]))


def test_a_load_whose_catalog_step_fails_leaves_no_file(catalog: firn.Catalog) -> None:
    table = new_table(catalog)
    table.upsert(load_rows([("a", 1)]))
    before, snapshot = stored(table), table.current_snapshot()
    conn = table.catalog.conn  # type: ignore[attr-defined]
    conn.execute(
        "CREATE FUNCTION refuse_files() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'no new files today'; END $$"
    )
    conn.execute(
        "CREATE TRIGGER refuse_files AFTER INSERT ON data_file "
        "FOR EACH ROW EXECUTE FUNCTION refuse_files()"
    )
    with pytest.raises(CommitError, match="no new files today"):
        table.load(load_rows([(p, k) for p in PARTS for k in range(50)]))
    assert stored(table) == before
    assert recorded(table) == set()
    assert table.current_snapshot() == snapshot


def test_a_compaction_prepared_before_a_load_cannot_commit_over_it(
    catalog: firn.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import firn.api.compact as compact_api

    table = new_table(catalog)
    table.upsert(load_rows([(p, k) for p in PARTS for k in range(20)], label="old"))
    table.delete(pa.table({"part": ["a", "b"], "k": [1, 2]}))
    loaded = load_rows([("a", 500), ("b", 501)], label="loaded")
    real = compact_api._runner

    def runner_then_load(*args: Any) -> Any:
        run = real(*args)

        def run_then_load(*run_args: Any) -> Any:
            results = run(*run_args)  # the tasks ran; their results are not recorded yet
            table.load(loaded, partitions=["part=a", "part=b"])
            return results

        return run_then_load

    monkeypatch.setattr(compact_api, "_runner", runner_then_load)
    summary = firn.compact(table, engine="local")
    outcomes = {p["partition"]: p["outcome"] for p in summary["plans"]}
    assert outcomes == {"part=a": "failed", "part=b": "failed", "part=c": "committed"}
    expected = as_view(loaded)
    expected.update(as_view(load_rows([("c", k) for k in range(20)], label="old")))
    assert as_view(table.read()) == expected
    monkeypatch.setattr(compact_api, "_runner", real)
    firn.compact(table, engine="local")  # replanned: nothing left to fold in
    assert as_view(table.read()) == expected


@pytest.mark.parametrize(
    ("rows", "partitions", "message"),
    [
        (pa.table({"part": ["a"], "qty": [1]}), None, "missing"),
        (load_rows([("a", 1)]).append_column("_op", pa.array(["U"])), None, "unexpected"),
        (
            load_rows([("a", 1)]).set_column(1, "k", pa.array(["one"])),
            None,
            "column 'k' has type string",
        ),
        (
            load_rows([("a", 1)]).set_column(1, "k", pa.array([None], pa.int64())),
            None,
            "key column 'k' has nulls",
        ),
        (load_rows([("a", 1), ("b", 2), ("a", 1)]), None, r"key \['a', 1\] appears more than once"),
        (load_rows([("a", 1), ("b", 2)]), ["part=a"], "not among the partitions"),
        (load_rows([("a", 1)]), ["region=a"], "must be written part=..."),
        (load_rows([("a", 1)]), [{"part": "a", "x": 1}], "every partition column"),
        ([{"part": "a"}], None, "must be a pyarrow.Table"),
    ],
)
def test_bad_input_raises_config_error_and_changes_nothing(
    catalog: firn.Catalog, rows: Any, partitions: Any, message: str
) -> None:
    table = new_table(catalog)
    table.upsert(load_rows([("a", 1), ("c", 3)]))
    before, snapshot, view = stored(table), table.current_snapshot(), as_view(table.read())
    with pytest.raises(ConfigError, match=message):
        table.load(rows, partitions=partitions)
    assert stored(table) == before
    assert recorded(table) == set()
    assert table.current_snapshot() == snapshot
    assert as_view(table.read()) == view


def test_naming_a_partition_of_an_unpartitioned_table_is_refused(catalog: firn.Catalog) -> None:
    table = new_table(catalog, partitioned=False)
    with pytest.raises(ConfigError, match="not partitioned"):
        table.load(load_rows([("a", 1)]), partitions=["part=a"])
    assert table.current_snapshot() == 0
