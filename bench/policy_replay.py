"""The floor of ``policy.py`` on the run's own inputs: the files its compaction tasks
read, replayed through one pyarrow read-sort-dedup-write per task, with no catalog, no
Spark and no per-task overhead.

``policy_floor.py`` builds inputs *like* the mean task's (its bytes, base share and
number of change files, one base file); a real task also opens every base file its
keys meet, several small ones for skewed keys, and per file, opening costs about as
much as the rows in it. Here the floor reads exactly what the sampled tasks read.

After the run the stack is down but its home is still there: the catalog's Postgres
is started again on the home's data directory just long enough to read the task
specs of committed plans; their input files are still on disk (a run is far shorter
than ``snapshot.retention``, so nothing was expired). Each sampled task's files are
read whole (deletion vectors are not applied: the floor merges every row), stamped
with their seq (base files 0), sorted by the primary key then seq, the last row of
each key kept (dropped when it is a delete), and written as one zstd Parquet file
encoded as the engine's writer does.
Every task is replayed twice and its faster time counted; the floor is the sampled
tasks' input bytes over the sum of those times, as the engine's number is its tasks'
input bytes over the time they ran.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from harness import best_of
from policy_floor import read_whole

from firn.model.merge_on_read import SEQ as STORED_SEQ
from firn.model.schema import RESERVED
from firn_localstack import PostgresServer

SEQ, DELETED = "_floor_seq", "_floor_deleted"


@dataclass(frozen=True)
class SampledTask:
    """What one committed task read."""

    task_id: int
    files: tuple[tuple[Path, int, bool, int], ...]
    """(path, seq, is a delete file, catalog size in bytes) of every input file."""

    @property
    def input_bytes(self) -> int:
        return sum(size for *_, size in self.files)


@dataclass(frozen=True)
class ReplayedFloor:
    tasks: int
    """Tasks replayed."""
    committed_tasks: int
    """Committed tasks the sample was drawn from."""
    missing: int
    """Sampled tasks left out because one of their files was gone."""
    input_bytes: int
    input_files: int
    seconds: float
    """Sum over the tasks of the faster of two replays."""

    @property
    def bytes_per_s(self) -> float:
        return self.input_bytes / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "committed_tasks": self.committed_tasks,
            "missing": self.missing,
            "input_bytes": self.input_bytes,
            "mean_task_input_bytes": round(self.input_bytes / self.tasks) if self.tasks else None,
            "mean_task_files": round(self.input_files / self.tasks, 2) if self.tasks else None,
            "seconds": round(self.seconds, 4),
            "bytes_per_s": round(self.bytes_per_s),
        }


def replay_floor(home: Path, sample: int = 300) -> ReplayedFloor | None:
    """The floor over up to ``sample`` committed tasks of the stack in ``home``, spread
    evenly over the run (None when there were none)."""
    key, tasks, committed = _sampled_tasks(home, sample)
    present = [t for t in tasks if all(path.exists() for path, *_ in t.files)]
    if not present:
        return None
    with tempfile.TemporaryDirectory(prefix="bench-policy-replay-", dir=home) as tmp:
        out = Path(tmp) / "out.parquet"
        seconds = sum(best_of(2, lambda t=t: merge(t, key, out)) for t in present)
    return ReplayedFloor(
        tasks=len(present),
        committed_tasks=committed,
        missing=len(tasks) - len(present),
        input_bytes=sum(t.input_bytes for t in present),
        input_files=sum(len(t.files) for t in present),
        seconds=seconds,
    )


def _sampled_tasks(home: Path, sample: int) -> tuple[list[str], list[SampledTask], int]:
    """The demo table's primary key, the sampled tasks, and how many were committed."""
    server = PostgresServer(home / "postgres" / "data")
    server.start()
    try:
        with psycopg.connect(server.url) as conn:
            found = conn.execute(
                "SELECT table_id, name, primary_key FROM catalog_table ORDER BY table_id LIMIT 1"
            ).fetchone()
            if found is None:
                return [], [], 0
            table_id, name, key = found
            ids = [
                task_id
                for (task_id,) in conn.execute(
                    "SELECT t.task_id FROM compaction_task t JOIN compaction_plan p "
                    "USING (plan_id) WHERE p.table_id = %s AND t.state = 'Committed' "
                    "ORDER BY t.task_id",
                    (table_id,),
                ).fetchall()
            ]
            chosen = _evenly(ids, sample)
            specs = conn.execute(
                "SELECT task_id, spec FROM compaction_task WHERE task_id = ANY(%s) "
                "ORDER BY task_id",
                (chosen,),
            ).fetchall()
    finally:
        server.stop()
    location = home / "warehouse" / f"{name}-{table_id}"
    tasks = [SampledTask(task_id, _inputs(spec, location)) for task_id, spec in specs]
    return list(key), tasks, len(ids)


def _evenly(ids: Sequence[int], count: int) -> list[int]:
    if len(ids) <= count:
        return list(ids)
    picks = np.linspace(0, len(ids) - 1, count).round().astype(int)
    return [ids[i] for i in sorted(set(picks.tolist()))]


def _inputs(spec: dict[str, Any], location: Path) -> tuple[tuple[Path, int, bool, int], ...]:
    base = [(location / f["path"], 0, False, int(f["size_bytes"])) for f in spec["base_files"]]
    change = [
        (location / f["path"], int(f["seq"]), f["file_type"] == "D", int(f["size_bytes"]))
        for f in spec["change_files"]
    ]
    return (*base, *change)


def merge(task: SampledTask, key: list[str], out: Path) -> int:
    """Read every input, keep each key's row of the greatest seq, write it; the rows
    written."""
    parts = [_read(path, seq, deleted) for path, seq, deleted, _ in task.files]
    rows = pa.concat_tables(parts, promote_options="default")
    rows = rows.take(pc.sort_indices(rows, [*((c, "ascending") for c in key), (SEQ, "ascending")]))
    last = np.ones(rows.num_rows, dtype=bool)
    if rows.num_rows > 1:
        # Compared in Arrow (strings too): a key differs from the next row's in a column.
        differs = np.zeros(rows.num_rows - 1, dtype=bool)
        for column in key:
            values = rows.column(column).combine_chunks()
            differs |= pc.not_equal(values[1:], values[:-1]).to_numpy(zero_copy_only=False)
        last[:-1] = differs
    deleted = rows.column(DELETED).combine_chunks().to_numpy(zero_copy_only=False)
    kept = rows.filter(pa.array(last & ~deleted)).drop_columns([SEQ, DELETED])
    # Encoded as the engine's writer and policy_floor.py's do: dictionary on the
    # strings outside the key, delta on integer key columns.
    schema = kept.schema
    strings = [f.name for f in schema if pa.types.is_string(f.type) and f.name not in key]
    deltas = {c: "DELTA_BINARY_PACKED" for c in key if pa.types.is_integer(schema.field(c).type)}
    pq.write_table(kept, out, compression="zstd", use_dictionary=strings, column_encoding=deltas)
    return int(kept.num_rows)


def _read(path: Path, seq: int, deleted: bool) -> pa.Table:
    """One file's table columns (the engine's own bookkeeping columns left out), with
    its seq (a minor output's rows carry their own) and whether its rows are deletes."""
    table = read_whole(path)
    seqs = (
        pc.fill_null(table.column(STORED_SEQ), seq)
        if STORED_SEQ in table.column_names
        else pa.array(np.full(table.num_rows, seq, np.int64))
    )
    table = table.drop_columns([c for c in table.column_names if c in RESERVED])
    table = table.append_column(SEQ, seqs)
    return table.append_column(DELETED, pa.array(np.full(table.num_rows, deleted)))
