"""Several producer processes committing to one table at once."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa

import firn
from firn.kafka.topics import Topics, ensure_topics
from firn.settings import FirnSettings
from tests.changesets import ReferenceModel, as_view, table_schema
from tests.integration.concurrent_writer import KIND, produce

WORKERS = 4
COMMITS = 15


def test_concurrent_producers_get_gap_free_seqs_and_a_consistent_view(
    settings: FirnSettings, tmp_path: Path
) -> None:
    ensure_topics(settings, (Topics.from_settings(settings).commits,))
    values: dict[str, Any] = {
        "database_url": settings.database_dsn(),
        "database_schema": settings.database_schema,
        "kafka_bootstrap": settings.kafka_bootstrap,
        "topic_prefix": settings.topic_prefix,
        "warehouse": str(tmp_path),
    }
    with firn.connect(settings=FirnSettings(**values)) as catalog:
        table = catalog.create_table(
            "shared", table_schema(KIND), ["part", "k"], ["part"], {"change.buckets": 2}
        )
        # A reader keeps reading while the producers commit; each read is checked
        # below against the model at the snapshot it read.
        reads: list[tuple[int, pa.Table]] = []
        stop = threading.Event()

        def reader() -> None:
            with firn.connect(settings=FirnSettings(**values)) as own:
                mine = own.table("shared")
                while not stop.is_set():
                    snapshot = mine.current_snapshot()
                    reads.append((snapshot, mine.read(snapshot=snapshot)))

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            with multiprocessing.get_context("spawn").Pool(WORKERS) as pool:
                results = pool.starmap(
                    produce, [(values, "shared", w, COMMITS) for w in range(WORKERS)]
                )
        finally:
            stop.set()
            thread.join()

        commits = sorted(c for worker in results for c in worker)
        seqs = [seq for seq, _ in commits]
        assert seqs == list(range(1, WORKERS * COMMITS + 1))
        for worker in results:  # each producer sees its own commits in order
            assert [seq for seq, _ in worker] == sorted(seq for seq, _ in worker)

        model = ReferenceModel()
        views = {0: model.view()}
        for seq, ops in commits:
            model.apply(ops)
            views[seq] = model.view()
        assert as_view(table.read()) == model.view()
        # Producer commits only: snapshot n holds exactly the commits with seq <= n.
        assert len(reads) > 1
        for snapshot, seen in reads:
            assert as_view(seen) == views[snapshot]
