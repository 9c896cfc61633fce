"""Producers keep committing while ``firn.compact`` runs again and again: nothing is
lost or doubled, and every read, at any snapshot, is the model at that point."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa

import firn
from firn.settings import FirnSettings
from tests.changesets import ReferenceModel, as_view, table_schema
from tests.integration.concurrent_writer import KIND, produce

WORKERS = 3
COMMITS = 20


def test_producers_committing_during_compactions_lose_nothing(
    settings: FirnSettings, tmp_path: Path
) -> None:
    values: dict[str, Any] = {
        "database_url": settings.database_dsn(),
        "database_schema": settings.database_schema,
        "kafka_bootstrap": None,
        "warehouse": str(tmp_path),
    }
    with firn.connect(settings=FirnSettings(**values)) as catalog:
        table = catalog.create_table(
            "busy",
            table_schema(KIND),
            ["part", "k"],
            ["part"],
            {"change.buckets": 4, "base.buckets": 2, "target-file-size": "4KiB"},
        )
        reads: list[tuple[int, pa.Table]] = []
        stop = threading.Event()

        def reader() -> None:
            with firn.connect(settings=FirnSettings(**values)) as own:
                mine = own.table("busy")
                while not stop.is_set():
                    snapshot = mine.current_snapshot()
                    reads.append((snapshot, mine.read(snapshot=snapshot)))

        thread = threading.Thread(target=reader)
        thread.start()
        summaries = []
        try:
            with multiprocessing.get_context("spawn").Pool(WORKERS) as pool:
                pending = pool.starmap_async(
                    produce, [(values, "busy", w, COMMITS) for w in range(WORKERS)]
                )
                while not pending.ready():
                    summaries.append(firn.compact(table))
                results = pending.get()
            summaries.append(firn.compact(table))
        finally:
            stop.set()
            thread.join()

        committed = [p for s in summaries for p in s["plans"] if p["outcome"] == "committed"]
        assert len(committed) >= 2, "the producers should have overlapped some compactions"
        assert all(s["failed_attempts"] == 0 for s in summaries)

        commits = sorted(c for worker in results for c in worker)
        assert [seq for seq, _ in commits] == list(range(1, WORKERS * COMMITS + 1))
        model = ReferenceModel()
        by_seq = {0: model.view()}
        for seq, ops in commits:
            model.apply(ops)
            by_seq[seq] = model.view()
        assert as_view(table.read()) == model.view()

        # A snapshot shows the commits up to the greatest seq committed by then,
        # whatever compactions happened in between.
        seq_at: dict[int, int] = {0: 0}
        last = 0
        for snapshot_id, seq in catalog.conn.execute(
            "SELECT snapshot_id, seq FROM snapshot WHERE table_id = %s ORDER BY snapshot_id",
            (table.table_id,),
        ).fetchall():
            last = seq if seq is not None else last
            seq_at[snapshot_id] = last
        assert len(reads) > 1
        for snapshot, seen in reads:
            assert as_view(seen) == by_seq[seq_at[snapshot]]
