"""Checks of a table's files that several model tests share, and deletion vectors
given by hand (the readers' tests need base files that carry one)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import firn
from firn.catalog.files import files_at
from firn.catalog.table_catalog import PostgresTableCatalog
from firn.catalog.vectors import replace_vectors
from firn.engine.policies import plan
from firn.engine.scan import scan_base
from firn.io.deletion_vectors import write_positions
from firn.model.files import FileEntry
from firn.model.tasks import TaskSpec
from firn.model.values import key_at, key_from_json
from firn.postgres.connection import Connection


def planned_specs(
    table: firn.Table, kind: str = "major", target_file_size: int = 1 << 30
) -> list[TaskSpec]:
    """The task specs the planner makes for the table's unpartitioned partition now,
    nothing merged before (made-up plan and task ids), for running the kernel."""
    entries = files_at(table.catalog.conn, table.table_id, table.current_snapshot())
    draft = plan(table.definition, table.properties, "", 0, entries, kind)
    assert draft is not None
    return [
        draft.task_spec(
            t,
            plan_id=1,
            task_id=n,
            table_id=table.table_id,
            location=table.location,
            target_file_size=target_file_size,
        )
        for n, t in enumerate(draft.tasks)
    ]


def live_paths(table: firn.Table) -> set[str]:
    """Every object the table's latest snapshot reads: its files and their vectors."""
    files = table.files()
    vectors = files.column("deletion_vector").drop_null().to_pylist()
    return set(files.column("path").to_pylist()) | set(vectors)


def check_base_files(table: firn.Table) -> None:
    """Every key has at most one live base row, and each base file's recorded key
    range holds its keys. (Base files of one node may overlap in key range: a fold
    that keeps a file, hiding replaced rows with a deletion vector, writes the new
    rows to files of their own.)"""
    entries = [e for e in _entries(table) if e.store == "base"]
    key = list(table.definition.primary_key)
    key_schema = table.definition.key_schema
    order = [(c, "ascending") for c in key]
    for e in entries:
        keys = scan_base(table.storage, table.definition, [e]).select(key)
        assert e.min_key is not None
        assert e.max_key is not None
        if keys.num_rows == 0:
            continue
        keys = keys.take(pc.sort_indices(keys, sort_keys=order))
        first = key_from_json(key_at(keys, key, 0), key_schema)
        last = key_from_json(key_at(keys, key, keys.num_rows - 1), key_schema)
        lo = key_from_json(e.min_key, key_schema)
        hi = key_from_json(e.max_key, key_schema)
        assert lo <= first <= last <= hi, e.path
    live = scan_base(table.storage, table.definition, entries).select(key)
    distinct = live.group_by(key).aggregate([]).num_rows
    assert distinct == live.num_rows, "a key has two live base rows"


def _entries(table: firn.Table) -> list[Any]:
    return files_at(catalog_conn(table), table.table_id, table.current_snapshot())


def catalog_conn(table: firn.Table) -> Connection:
    catalog = table.catalog
    assert isinstance(catalog, PostgresTableCatalog)
    return catalog.conn


def base_entries(table: firn.Table) -> list[FileEntry]:
    """The live base files, with their deletion vectors, by path."""
    entries = files_at(catalog_conn(table), table.table_id, table.current_snapshot())
    return sorted((e for e in entries if e.store == "base"), key=lambda e: e.path)


def rows_at(table: firn.Table, entry: FileEntry, positions: Sequence[int]) -> list[dict[str, Any]]:
    """The rows stored at ``positions`` of a data file (hidden or not)."""
    rows = pq.read_table(table.storage.full_path(entry.path)).to_pylist()
    return [rows[p] for p in positions]


def hide_rows(table: firn.Table, entry: FileEntry, positions: Sequence[int]) -> int:
    """Give base file ``entry`` a deletion vector hiding ``positions``, in a snapshot
    of its own, as a compaction commit would; returns the snapshot."""
    path = f"test-vectors/{uuid.uuid4().hex}.dv.parquet"
    vector = write_positions(table.storage, path, positions)
    conn = catalog_conn(table)
    with conn.transaction():
        (snapshot,) = conn.execute(
            "UPDATE catalog_table SET last_snapshot = last_snapshot + 1 WHERE table_id = %s "
            "RETURNING last_snapshot",
            (table.table_id,),
        ).fetchone() or (0,)
        conn.execute(
            "INSERT INTO snapshot (table_id, snapshot_id, kind, summary) "
            "VALUES (%s, %s, 'compaction', %s)",
            (table.table_id, snapshot, json.dumps({"deletion_vectors": 1})),
        )
        replace_vectors(conn, table.table_id, snapshot, {entry.file_id: vector})
    return int(snapshot)


def commit_kv(
    table: firn.Table, model: dict[Any, Any], upserts: dict[Any, Any], deletes: Sequence[Any]
) -> None:
    """Commit upserts of v by k, then deletes of k, to a table of columns k, v, and apply
    them to ``model`` in that order (the deletes come later in the change set)."""
    rows = [{"k": k, "v": v, "_op": "U"} for k, v in upserts.items()]
    rows += [{"k": k, "v": None, "_op": "D"} for k in deletes]
    schema = pa.schema([*table.schema, pa.field("_op", pa.string())])
    table.commit(pa.Table.from_pylist(rows, schema))
    model.update(upserts)
    for k in deletes:
        model.pop(k, None)
