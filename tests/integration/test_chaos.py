"""Chaos: ``kill -9`` of services drawn at random (seeded, so a failure replays)
while a producer commits, each restarted a few commits later. Ends with the table
equal to the model, nothing stuck, no plan committed twice, and the table's
published Iceberg table (the publisher is among the victims) caught up: read by
pyiceberg it equals the model, and every retained published snapshot equals Firn's
folded view at the Firn snapshot it names.

The targeted cases (a kill inside a commit transaction, a replay of every event)
are in test_faults.py; this one is about kills at moments nobody chose.
"""

from __future__ import annotations

import random
from pathlib import Path

import firn
from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from tests.integration.cdc_workload import (
    PROPERTIES,
    SCHEMA,
    CdcProducer,
    assert_committed_once,
    wait_until_settled,
)
from tests.integration.iceberg_readers import check_publications
from tests.integration.service_processes import running_services

SERVICES = ["metrics", "planner", "dispatcher", "committer", "publisher"]
SEED = 20261123


def test_random_kills_lose_nothing(stack_settings: FirnSettings, tmp_path: Path) -> None:
    settings = stack_settings
    ensure_topics(settings, Topics.from_settings(settings).all())
    rng = random.Random(SEED)
    down: dict[str, int] = {}  # service -> the commit after which it comes back
    kills: list[tuple[int, str]] = []
    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, SERVICES, FIRN_METRICS_CHECK_INTERVAL="5") as svc,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        workload = CdcProducer(table, seed=SEED)

        def chaos(n: int) -> None:
            for name, back in list(down.items()):
                if n >= back:
                    svc.start(name)
                    del down[name]
            svc.assert_running()
            if n == 40 and "publisher" not in down:  # it always dies once mid-run
                svc.kill("publisher")
                kills.append((n, "publisher"))
                down["publisher"] = n + 3
            if n % 10 == 5:
                victim = rng.choice([s for s in SERVICES if s not in down])
                svc.kill(victim)
                kills.append((n, victim))
                down[victim] = n + rng.randint(2, 12)

        workload.run(commits=160, per_second=8, between=chaos)
        for name in down:
            svc.start(name)
        assert len({victim for _, victim in kills}) >= 3, f"too few services killed: {kills}"
        wait_until_settled(table, svc, timeout=300)
        workload.check()
        assert_committed_once(catalog.conn, table.table_id)
        check_publications(settings, table, timeout=60)
        svc.assert_running()
