"""Database and broker restarts are weather: ten Postgres restarts and two Kafka
broker restarts while a producer commits, and no service process exits; the table
ends equal to the model with nothing stuck.

Postgres and Kafka are this test's own (the project's local runner in a private
home), not the session's: the test stops and starts them, which an address from the
environment or a shared server would not allow.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

import firn
from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from firn_localstack import KafkaBroker, PostgresServer
from tests.integration.cdc_workload import PROPERTIES, SCHEMA, CdcProducer, wait_until_settled
from tests.integration.service_processes import REPO, running_services

SERVICES = ["metrics", "planner", "dispatcher", "committer"]
POSTGRES_RESTARTS = 10
KAFKA_RESTARTS = 2


@pytest.fixture
def own_backends(
    base_settings: FirnSettings, tmp_path: Path, unique: str
) -> Iterator[tuple[FirnSettings, PostgresServer, KafkaBroker]]:
    # Inside the repo's .firn: the Postgres system user must reach the data folder.
    home = REPO / ".firn" / f"test-restarts-{uuid.uuid4().hex[:8]}"
    postgres = PostgresServer(home / "postgres" / "data")
    kafka = KafkaBroker(REPO / ".firn" / "cache", home / "kafka")
    postgres.start()
    try:
        kafka.start()
        settings = base_settings.model_copy(
            update={
                "database_url": SecretStr(postgres.url),
                "kafka_bootstrap": kafka.bootstrap,
                "database_schema": f"test_{unique}",
                "topic_prefix": f"test-{unique}.",
                "warehouse": str(tmp_path / "warehouse"),
                "home": tmp_path / "home",
            }
        )
        yield settings, postgres, kafka
    finally:
        kafka.stop()
        postgres.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_services_ride_out_postgres_and_broker_restarts(
    own_backends: tuple[FirnSettings, PostgresServer, KafkaBroker], tmp_path: Path
) -> None:
    settings, postgres, kafka = own_backends
    ensure_topics(settings, Topics.from_settings(settings).all())
    restarts = {"postgres": 0, "kafka": 0}
    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, SERVICES, FIRN_METRICS_CHECK_INTERVAL="5") as svc,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        workload = CdcProducer(table, seed=17)

        def weather(n: int) -> None:
            svc.assert_running()
            if n % 12 == 6 and restarts["postgres"] < POSTGRES_RESTARTS:
                postgres.stop()  # fast shutdown: every connection is cut
                time.sleep(1.0)
                postgres.start()
                restarts["postgres"] += 1
            elif n in (45, 100):
                kafka.stop()
                time.sleep(2.0)
                kafka.start()
                restarts["kafka"] += 1

        workload.run(commits=12 * POSTGRES_RESTARTS + 10, per_second=8, between=weather)
        assert restarts == {"postgres": POSTGRES_RESTARTS, "kafka": KAFKA_RESTARTS}
        wait_until_settled(table, svc, timeout=300)
        workload.check()
        svc.assert_running()
