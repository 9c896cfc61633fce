"""Deletion vectors on a real catalog (``firn.io.deletion_vectors``): once a base file
carries one, every read skips the rows it hides (``read``, filtered scans, splits,
compaction's merge), a read pinned at an older snapshot still sees them, ``verify``
checks the vector, and retention deletes a replaced vector but never a live one.

The vectors here are given by hand (``hide_rows``: ``replace_vectors`` in a snapshot
of the test's own, as a compaction commit does): hiding a row without writing a newer one makes its
key disappear, which the model below follows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

import firn
from firn.catalog.claiming import claim_task, release_tasks
from firn.catalog.expiry import expire
from firn.catalog.files import files_at
from firn.catalog.progress import written_bytes
from firn.catalog.results import record_result
from firn.engine import inputs, kernel
from firn.engine.kernel import run_task
from firn.engine.planning import draft_now, plan_now
from firn.engine.vectors import BASE_KEYS
from firn.engine.worker_pool import WorkerPool
from firn.errors import CommitError, CorruptFileError
from firn.io.deletion_vectors import SCHEMA as VECTOR_SCHEMA
from firn.io.deletion_vectors import read_positions
from firn.model.files import DeletionVector, FileEntry
from firn.model.plans import PlanRecord
from firn.model.tasks import TaskResult, TaskSpec
from tests.integration.table_checks import (
    base_entries,
    catalog_conn,
    check_base_files,
    hide_rows,
    live_paths,
    rows_at,
)

SCHEMA = pa.schema(
    [pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string(), nullable=False)]
)
PROPERTIES = {"base.buckets": 1, "change.buckets": 1, "snapshot.retention": 0}


def _rows(keys: Sequence[int] | range, tag: str) -> pa.Table:
    return pa.table({"k": list(keys), "v": [f"{tag}{k}" for k in keys]}, schema=SCHEMA)


def _view(table: firn.Table, snapshot: int | None = None) -> dict[int, str]:
    return {r["k"]: r["v"] for r in table.read(snapshot=snapshot).to_pylist()}


def _compact(table: firn.Table) -> None:
    summary = firn.compact(table, kind="major", engine="local")
    assert summary["failed_attempts"] == 0, summary["errors"]


def _upsert_and_fold(
    table: firn.Table, model: dict[int, str], keys: Sequence[int] | range, tag: str
) -> None:
    """Upsert ``keys`` (values ``<tag><key>``), fold them, and check the table still
    reads as ``model`` (updated here) with sound base files."""
    table.upsert(_rows(keys, tag))
    model.update({k: f"{tag}{k}" for k in keys})
    _compact(table)
    check_base_files(table)
    assert _view(table) == model


def _keys_at(table: firn.Table, entry: FileEntry, positions: Sequence[int]) -> list[int]:
    return [r["k"] for r in rows_at(table, entry, positions)]


def _table(
    catalog: firn.Catalog, name: str, commits: int = 1, props: dict[str, Any] | None = None
) -> firn.Table:
    """Keys 0..299 in base: one file per commit (disjoint commits move into base)."""
    props = {**PROPERTIES, **(props or {})}
    if commits > 1:
        props["target-file-size"] = "2KiB"
    table = catalog.create_table(name, SCHEMA, ["k"], [], props)
    step = 300 // commits
    for start in range(0, 300, step):
        table.upsert(_rows(range(start, start + step), "a"))
    _compact(table)
    return table


def test_reads_skip_hidden_rows_and_older_snapshots_still_see_them(
    shared_catalog: firn.Catalog,
) -> None:
    table = _table(shared_catalog, "dv_reads")
    (base,) = base_entries(table)
    before = table.current_snapshot()
    model = _view(table)
    positions = [0, 1, 2, 150, 299]
    hidden = _keys_at(table, base, positions)
    hide_rows(table, base, positions)
    for k in hidden:
        del model[k]

    assert _view(table) == model
    assert _view(table, before) == {k: f"a{k}" for k in range(300)}
    (row,) = [r for r in table.files().to_pylist() if r["store"] == "base"]
    assert row["deleted_records"] == len(positions)
    assert row["path"] == base.path

    # A filter is applied after the vector; splits read the same rows.
    scanned = table.scan(filter="k >= 100").to_arrow().to_pylist()
    assert {r["k"]: r["v"] for r in scanned} == {k: v for k, v in model.items() if k >= 100}
    split_rows = [
        r
        for split in table.scan().splits()
        for r in firn.engine.splits.read_merged(split).to_pylist()
    ]
    assert {r["k"]: r["v"] for r in split_rows} == model

    # A newer change for a hidden key brings it back, on top of the vector.
    table.upsert(_rows([hidden[0]], "b"))
    model[hidden[0]] = f"b{hidden[0]}"
    assert _view(table) == model


def test_compaction_reads_base_files_without_their_hidden_rows(
    shared_catalog: firn.Catalog,
) -> None:
    # Vectors off for the fold: touched files are rewritten, read through their vectors.
    table = _table(
        shared_catalog, "dv_compaction", commits=3, props={"deletion-vectors.max-ratio": 0}
    )
    files = base_entries(table)
    assert len(files) == 3
    model = _view(table)
    for entry in files[:2]:
        hidden = _keys_at(table, entry, [0, entry.record_count - 1])
        hide_rows(table, entry, [0, entry.record_count - 1])
        for k in hidden:
            del model[k]
    # Changes overlapping the first file only: it is rewritten, the second keeps its vector.
    first_keys = _keys_at(table, files[0], [1, 2])
    table.upsert(_rows(first_keys, "c"))
    model.update({k: f"c{k}" for k in first_keys})
    _compact(table)
    assert _view(table) == model
    after = {e.path: e for e in base_entries(table)}
    assert files[0].path not in after, "the overlapped file was rewritten"
    kept = after[files[1].path]
    assert kept.deletion_vector is not None
    assert kept.deletion_vector.rows == 2
    assert table.verify().problems == ()


def test_verify_and_reads_refuse_a_damaged_vector(shared_catalog: firn.Catalog) -> None:
    table = _table(shared_catalog, "dv_damaged")
    (base,) = base_entries(table)
    hide_rows(table, base, [5, 6])
    (entry,) = base_entries(table)
    assert entry.deletion_vector is not None
    # Same size and row count, but a position past the end of the base file.
    damaged = pa.table({"pos": pa.array([5, 10_000], pa.int64())})
    table.storage.write_parquet(entry.deletion_vector.path, damaged)
    report = table.verify()
    (problem,) = report.problems
    assert problem.path.endswith(entry.deletion_vector.path)
    with pytest.raises(CorruptFileError) as caught:
        table.read()
    assert caught.value.path.endswith(entry.deletion_vector.path)


def test_verify_reads_a_vector_from_storage_not_what_the_process_kept(
    shared_catalog: firn.Catalog,
) -> None:
    table = _table(shared_catalog, "dv_damaged_later")
    (base,) = base_entries(table)
    hide_rows(table, base, [5, 6])
    (entry,) = base_entries(table)
    assert entry.deletion_vector is not None
    assert len(_view(table)) == 298  # the vector is read, and kept by this process
    # The same bytes, size and row count but positions out of order: only decoding
    # the vector again finds it.
    damaged = pa.table([pa.array([6, 5], pa.int64())], schema=VECTOR_SCHEMA)
    size = table.storage.write_parquet(
        entry.deletion_vector.path, damaged, {"pos": "DELTA_BINARY_PACKED"}
    )
    assert size == entry.deletion_vector.size_bytes
    (problem,) = table.verify().problems
    assert problem.path.endswith(entry.deletion_vector.path)
    assert "ascending" in problem.detail


def test_a_fold_looks_keys_up_in_the_base_files_the_last_one_read(
    shared_catalog: firn.Catalog,
) -> None:
    """The second fold of late updates into the same base files reads their keys
    from the process's cache (firn.engine.vectors.BASE_KEYS), with the same result."""
    table = _log(shared_catalog, "dv_cached_keys")
    model = _view(table)
    _upsert_and_fold(table, model, [5, 150], "late")
    hits = BASE_KEYS.hits
    _upsert_and_fold(table, model, [6, 151, 250], "again")
    assert BASE_KEYS.hits >= hits + 2  # the two files the first fold kept
    assert _hidden(table)[_in_key_order(table)[0]] == 2
    assert table.verify().problems == ()


def test_a_fold_hides_rows_by_a_key_of_two_columns(shared_catalog: firn.Catalog) -> None:
    """Keys of more than one column are looked up by a join (one column: a set
    lookup); both find the rows a fold hides."""
    schema = pa.schema(
        [
            pa.field("day", pa.string(), nullable=False),
            pa.field("k", pa.int64(), nullable=False),
            pa.field("v", pa.string(), nullable=False),
        ]
    )
    props = {**PROPERTIES, "target-file-size": "2KiB", "deletion-vectors.max-ratio": 0.3}
    table = shared_catalog.create_table("dv_two_columns", schema, ["day", "k"], [], props)

    def rows(keys: Sequence[tuple[str, int]], tag: str) -> pa.Table:
        return pa.table(
            {
                "day": [d for d, _ in keys],
                "k": [k for _, k in keys],
                "v": [f"{tag}{d}{k}" for d, k in keys],
            },
            schema=schema,
        )

    for day in ("a", "b", "c"):
        table.upsert(rows([(day, k) for k in range(100)], "first"))
    _compact(table)
    files = _in_key_order(table)
    assert len(files) == 3
    # The same k under another day is another key: only ("a", 5) and ("b", 7) change.
    table.upsert(rows([("a", 5), ("b", 7), ("d", 5)], "late"))
    table.delete(pa.table({"day": ["c"], "k": [9]}))
    _compact(table)
    check_base_files(table)
    hidden = _hidden(table)
    assert [hidden[p] for p in files] == [1, 1, 1], "kept, one row hidden in each"
    view = {(r["day"], r["k"]): r["v"] for r in table.read().to_pylist()}
    expected = {(d, k): f"first{d}{k}" for d in "abc" for k in range(100)}
    expected.update({("a", 5): "latea5", ("b", 7): "lateb7", ("d", 5): "lated5"})
    del expected[("c", 9)]
    assert view == expected
    assert table.verify().problems == ()


def test_a_fold_opens_each_change_file_once(
    shared_catalog: firn.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold's change rows are read whole once, for the key lookup and the merge
    (opening a small file costs more than its rows); past the memory budget the
    key columns are read first and the rows again, with the same outputs."""
    table = _log(shared_catalog, "dv_read_once")
    table.upsert(_rows([5, 150], "late"))
    table.delete(pa.table({"k": [250]}))
    spec = _fold_spec(table)
    assert spec.change_files
    assert spec.base_files
    opened: list[str] = []
    reading = inputs.read_batches

    def counted(storage: Any, f: Any, *args: Any) -> Any:
        opened.append(f.path)
        return reading(storage, f, *args)

    monkeypatch.setattr(inputs, "read_batches", counted)
    held = run_task(table.definition, spec, 1, kernel.KernelLimits())
    changes = sorted(f.path for f in spec.change_files)
    assert sorted(p for p in opened if p in changes) == changes
    opened.clear()
    streamed = run_task(table.definition, spec, 2, kernel.KernelLimits(memory_budget=1))
    assert sorted(p for p in opened if p in changes) == sorted(changes * 2)
    assert held.ok
    assert streamed.ok
    assert _contents(table, held) == _contents(table, streamed)


def test_a_fold_on_a_merge_worker_process_does_what_it_does_here(
    shared_catalog: firn.Catalog,
) -> None:
    """The dispatcher's worker processes (firn.engine.worker_pool) run the same kernel:
    the same kept files, vectors and rows as in this process."""
    table = _log(shared_catalog, "dv_worker")
    table.upsert(_rows([5, 150, 400], "late"))
    spec = _fold_spec(table)
    here = run_task(table.definition, spec, 1, kernel.KernelLimits())
    pool = WorkerPool(1)
    try:
        (there,) = pool(table.definition, [(spec, 2)], kernel.KernelLimits())
    finally:
        pool.close()
    assert there.ok, there.error
    assert _contents(table, there) == _contents(table, here)
    assert any(o.deletion_vector for o in there.outputs), "a kept file with a vector"


def _fold_spec(table: firn.Table) -> TaskSpec:
    """The one task of a major plan of the table's only partition (stored, never run
    by anyone but the test)."""
    record = plan_now(catalog_conn(table), table, "", "major")
    assert isinstance(record, PlanRecord)
    (spec,) = record.tasks
    return spec


def _contents(table: firn.Table, result: TaskResult) -> list[tuple[Any, ...]]:
    """What each output says: rows written, or a kept file's hidden positions."""
    said = []
    for o in result.outputs:
        if o.replaces is not None:
            v = o.deletion_vector
            hidden = () if v is None else tuple(read_positions(table.storage, v, o.record_count))
            said.append(("kept", o.replaces, hidden))
        else:
            said.append(
                ("written", tuple(map(tuple, table.storage.read_parquet(o.path).to_pylist())))
            )
    return sorted(said, key=repr)


def test_a_vector_only_attaches_to_a_live_base_file(shared_catalog: firn.Catalog) -> None:
    table = _table(shared_catalog, "dv_refused")
    table.upsert(_rows([1], "z"))
    entries = files_at(catalog_conn(table), table.table_id, table.current_snapshot())
    change = next(e for e in entries if e.store == "change")
    (base,) = base_entries(table)
    for entry, positions in ((change, [0]), (base, list(range(301)))):
        with pytest.raises(CommitError):
            hide_rows(table, entry, positions)
    assert base_entries(table)[0].deletion_vector is None


def test_retention_deletes_replaced_vectors_and_keeps_the_live_one(
    shared_catalog: firn.Catalog,
) -> None:
    # Orphans of any age are swept: the live vector must be known to the catalog.
    table = _table(shared_catalog, "dv_retention", props={"orphan.retention": 0})
    (base,) = base_entries(table)
    hide_rows(table, base, [1])
    (first,) = base_entries(table)
    hide_rows(table, first, [1, 2])
    (second,) = base_entries(table)
    assert first.deletion_vector is not None
    assert second.deletion_vector is not None
    model = _view(table)

    (report,) = expire(catalog_conn(table), table.name).tables
    assert first.deletion_vector.path in report.files
    assert not table.storage.exists(first.deletion_vector.path)
    assert base.path not in report.files
    assert table.storage.exists(base.path)
    assert table.storage.exists(second.deletion_vector.path), "the live vector stays"
    assert report.swept == (), "the storage sweep knows the live vector"
    assert _view(table) == model
    (listed,) = table.files().column("deletion_vector").to_pylist()
    assert listed == second.deletion_vector.path
    assert {f.path for f in table.storage.walk()} == live_paths(table) == {base.path, listed}

    # A second run finds nothing more to delete.
    (again,) = expire(catalog_conn(table), table.name).tables
    assert again.files == ()


# -- folds that keep base files (firn.engine.vectors) ---------------------------------


def _log(catalog: firn.Catalog, name: str, ratio: float = 0.3) -> firn.Table:
    """Three base files of 100 keys each (0-99, 100-199, 200-299), not small."""
    table = _table(catalog, name, commits=3)
    table.set_properties({"deletion-vectors.max-ratio": ratio})
    assert [e.record_count for e in base_entries(table)] == [100, 100, 100]
    return table


def _in_key_order(table: firn.Table) -> list[str]:
    return [e.path for e in sorted(base_entries(table), key=lambda e: e.min_key or [])]


def _hidden(table: firn.Table) -> dict[str, int]:
    return {r["path"]: r["deleted_records"] for r in table.files().to_pylist()}


def test_late_updates_keep_the_base_files_they_touch(shared_catalog: firn.Catalog) -> None:
    table = _log(shared_catalog, "dv_late")
    files = _in_key_order(table)
    model = _view(table)
    snapshots = [(table.current_snapshot(), dict(model))]
    written = written_bytes(catalog_conn(table), table.table_id).compacted

    table.upsert(_rows([5, 150, 400], "late"))  # two old keys and a new one
    model.update({k: f"late{k}" for k in (5, 150, 400)})
    _compact(table)
    check_base_files(table)
    assert _view(table) == model
    snapshots.append((table.current_snapshot(), dict(model)))
    hidden = _hidden(table)
    assert [hidden[p] for p in files] == [1, 1, 0], "kept, the replaced rows hidden"
    (new,) = set(hidden) - set(files)
    assert hidden[new] == 0
    after = written_bytes(catalog_conn(table), table.table_id).compacted
    (fresh,) = [e for e in base_entries(table) if e.path == new]
    vectors = [e.deletion_vector for e in base_entries(table) if e.deletion_vector]
    assert after - written == fresh.size_bytes + sum(v.size_bytes for v in vectors)

    # A delete of a key in a kept file grows its vector; nothing else is written.
    table.delete(pa.table({"k": [7]}))
    del model[7]
    _compact(table)
    check_base_files(table)
    assert _view(table) == model
    assert _hidden(table)[files[0]] == 2
    assert new in _hidden(table)
    snapshots.append((table.current_snapshot(), dict(model)))

    # Updating a key again hides its row in the file the last fold wrote.
    _upsert_and_fold(table, model, [5], "again")
    snapshots.append((table.current_snapshot(), dict(model)))

    for snapshot, view in snapshots:
        assert _view(table, snapshot) == view
    assert table.verify().problems == ()


def test_a_fold_reads_only_the_base_files_a_commits_key_spans_meet(
    shared_catalog: firn.Catalog,
) -> None:
    """An event log's commit (a late update and new keys past the base) records its
    key spans, so the fold's task reads the one base file the late key falls in, not
    every file the commit's key range spans."""
    table = _log(shared_catalog, "dv_spans")
    files = _in_key_order(table)
    model = _view(table)
    keys = [150, *range(1000, 1040)]
    table.upsert(_rows(keys, "log"))
    model.update({k: f"log{k}" for k in keys})
    (spans,) = catalog_conn(table).execute(
        "SELECT key_spans FROM data_file WHERE table_id = %s AND store = 'change' "
        "AND removed_snapshot IS NULL",
        (table.table_id,),
    ).fetchone() or (None,)
    assert spans == [[[150], [150], 1], [[1000], [1039], 40]]
    draft = draft_now(catalog_conn(table), table, "", "major")
    assert draft is not None
    (task,) = draft.tasks
    assert [f.path for f in task.base_files] == [files[1]]
    _compact(table)
    check_base_files(table)
    assert _view(table) == model
    assert _hidden(table)[files[1]] == 1, "kept with a vector"
    assert {files[0], files[2]} <= set(_hidden(table))


def test_a_file_past_the_ratio_is_rewritten_and_zero_turns_vectors_off(
    shared_catalog: firn.Catalog,
) -> None:
    table = _log(shared_catalog, "dv_ratio")
    files = _in_key_order(table)
    model = _view(table)
    _upsert_and_fold(table, model, range(0, 40), "many")  # 40 % of the first file
    paths = set(_hidden(table))
    assert files[0] not in paths, "a vector would hide 40 % > 30 %: rewritten"
    assert {files[1], files[2]} <= paths

    table.set_properties({"deletion-vectors.max-ratio": 0})
    _upsert_and_fold(table, model, [150], "off")
    assert files[1] not in set(_hidden(table)), "with vectors off, a touched file is rewritten"
    assert all(e.deletion_vector is None for e in base_entries(table))


def test_small_base_files_get_vectors_down_to_the_minimum_size(
    shared_catalog: firn.Catalog,
) -> None:
    """An event log's base stays under ``small-file-bytes`` for a while: its files are
    still kept with a vector, down to ``deletion-vectors.min-file-bytes`` (a 128th of
    the small-file limit unless set); a file under that is rewritten."""
    table = _log(shared_catalog, "dv_small")
    files = _in_key_order(table)
    sizes = [e.size_bytes for e in base_entries(table)]
    # Every base file is now small.
    table.set_properties({"target-file-size": 4 * max(sizes), "small-file-bytes": 2 * max(sizes)})
    assert all(size < table.properties.small_file_threshold for size in sizes)
    assert table.properties.vector_min_file_bytes <= min(sizes)
    model = _view(table)
    _upsert_and_fold(table, model, [5], "late")
    assert _hidden(table)[files[0]] == 1, "a small file kept, the replaced row hidden"

    table.set_properties({"deletion-vectors.min-file-bytes": max(sizes) + 1})
    _upsert_and_fold(table, model, [150], "later")
    assert files[1] not in set(_hidden(table)), "under the minimum: rewritten"
    assert {files[0], files[2]} <= set(_hidden(table)), "untouched and kept files stay"


def test_small_files_with_vectors_are_still_coalesced_and_a_full_rewrites_all(
    shared_catalog: firn.Catalog,
) -> None:
    """Small base files a fold would keep with a vector (past
    ``deletion-vectors.min-file-bytes``) are still merged once the partition passes the
    small-file rule, with or without changes to fold: the tiered plan names them as
    files to rewrite, not to keep. And a full compaction keeps no file."""
    table = _table(shared_catalog, "dv_coalesce", commits=6)
    table.set_properties({"deletion-vectors.max-ratio": 0.3})
    sizes = [e.size_bytes for e in base_entries(table)]
    assert len(sizes) == 6, "one file a commit: keys in order move into base"
    table.set_properties(
        {
            "target-file-size": 8 * max(sizes),
            "small-file-bytes": 2 * max(sizes),
            "deletion-vectors.min-file-bytes": min(sizes),
            "major.file-count": 3,
        }
    )
    model = _view(table)
    table.upsert(_rows([5, 400], "late"))  # one key in the first file, one past the last
    model.update({5: "late5", 400: "late400"})
    assert table.status()["partitions"][0]["due"] == "major"
    summary = firn.compact(table, kind="auto", engine="local")
    assert summary["failed_attempts"] == 0, summary["errors"]
    check_base_files(table)
    assert _view(table) == model
    entries = base_entries(table)
    assert len(entries) == 1, "the six small files and the new rows in one file"
    assert entries[0].deletion_vector is None
    assert table.status()["partitions"][0]["due"] is None, "the small-file rule is answered"

    # A full compaction rewrites a base file a fold would keep as it is.
    table.set_properties({"small-file-bytes": 1, "deletion-vectors.min-file-bytes": 1})
    before = {e.path for e in base_entries(table)}
    summary = firn.compact(table, kind="full", engine="local")
    assert summary["failed_attempts"] == 0, summary["errors"]
    assert {e.path for e in base_entries(table)}.isdisjoint(before), "every file rewritten"
    assert _view(table) == model
    assert table.verify().problems == ()


def test_a_result_cannot_keep_a_file_it_did_not_read(shared_catalog: firn.Catalog) -> None:
    """A fold's result may name its own base inputs as kept, as they are, with their
    vector or a larger one of its own; naming another file, changing its stats, or
    shrinking its vector fails the attempt."""
    table = _log(shared_catalog, "dv_forged")
    other = _log(shared_catalog, "dv_forged_other")
    table.upsert(_rows([5], "late"))
    conn = catalog_conn(table)
    record = plan_now(conn, table, "", "major")
    assert isinstance(record, PlanRecord)
    release_tasks(conn, record)
    (task,) = record.tasks
    spec, attempt = claim_task(conn, task.task_id, "test", 60) or (None, 0)
    assert spec is not None
    honest = run_task(table.definition, spec, attempt)
    kept = [o for o in honest.outputs if o.carried]
    assert kept, "the fold kept base files"
    first = kept[0]
    foreign = base_entries(other)[0]
    forgeries = [
        replace(first, replaces=foreign.file_id, path=foreign.path),
        replace(first, record_count=first.record_count + 1),
        replace(first, deletion_vector=None)
        if first.deletion_vector is not None
        else replace(first, deletion_vector=DeletionVector("../elsewhere.parquet", 1, 1)),
    ]
    for forged in forgeries:
        outputs = tuple(forged if o is first else o for o in honest.outputs)
        result = replace(honest, attempt=attempt, outputs=outputs)
        assert record_result(conn, result, max_attempts=9) == "retry"
        conn.execute(
            "UPDATE compaction_task SET not_before = NULL WHERE task_id = %s", (task.task_id,)
        )
        spec, attempt = claim_task(conn, task.task_id, "test", 60) or (None, 0)
        assert spec is not None
    result = run_task(table.definition, spec, attempt)
    assert record_result(conn, result, max_attempts=9) == "prepared"
