"""The integration suite's two ways to its backends give the same results: the same
seeded producer and the five services, once on Postgres and Kafka as testcontainers
(the path ``make test`` takes when a Docker daemon answers) and once on the local
runner's processes (the path without Docker), end with the same merged table, equal
to the model, every plan committed once and both stacks settled.

Run by ``make test-docker`` (it needs the images ``make images`` builds, or the
official ones where Docker Hub answers).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import firn
from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from tests.integration.backends import (
    Backend,
    docker_answers,
    kafka_container,
    local_kafka,
    local_postgres,
    postgres_container,
)
from tests.integration.cdc_workload import (
    PROPERTIES,
    SCHEMA,
    CdcProducer,
    assert_committed_once,
    wait_until_settled,
)
from tests.integration.conftest import private_settings
from tests.integration.service_processes import running_services

REPO = Path(__file__).resolve().parents[2]
SERVICES = ["metrics", "planner", "dispatcher", "committer", "publisher"]


@pytest.fixture
def home() -> Iterator[Path]:
    """Inside the repo's .firn, where the local Postgres's system user can reach it."""
    path = REPO / ".firn" / f"test-paths-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def settle_a_streamed_table(
    kafka: AbstractContextManager[Backend],
    postgres: AbstractContextManager[Backend],
    work: Path,
) -> dict[str, Any]:
    """The seeded producer against the five services on these backends; what it ends with."""
    work.mkdir()
    with kafka as kafka_at, postgres as postgres_at:
        unique = uuid.uuid4().hex[:10]
        with private_settings(FirnSettings(), kafka_at.address, postgres_at, unique) as base:
            settings = base.model_copy(
                update={"warehouse": str(work / "warehouse"), "home": work / "home"}
            )
            ensure_topics(settings, Topics.from_settings(settings).all())
            with (
                firn.connect(settings=settings) as catalog,
                running_services(
                    settings, work, SERVICES, FIRN_METRICS_CHECK_INTERVAL="5"
                ) as services,
            ):
                table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
                producer = CdcProducer(table, seed=17)
                producer.run(commits=80, per_second=8, between=lambda n: services.assert_running())
                settled = wait_until_settled(table, services, timeout=240)
                producer.check()
                assert_committed_once(catalog.conn, table.table_id)
                stores = {r["store"] for r in table.files().to_pylist()}
                return {
                    "backends": (kafka_at.source, postgres_at.source),
                    "settled": settled,
                    "read": table.read().sort_by([("day", "ascending"), ("id", "ascending")]),
                    "model": producer.model,
                    "compacted": "base" in stores,
                }


def test_testcontainers_and_the_local_runner_end_with_the_same_table(home: Path) -> None:
    assert docker_answers(), "no Docker daemon answers (deploy/images/install-docker.sh starts one)"
    containers = settle_a_streamed_table(kafka_container(), postgres_container(), home / "tc")
    local = settle_a_streamed_table(
        local_kafka(home, REPO / ".firn" / "cache"), local_postgres(home), home / "local"
    )
    assert "testcontainers" in containers["backends"][0], containers["backends"]
    assert "testcontainers" in containers["backends"][1], containers["backends"]
    assert "local runner" in local["backends"][0], local["backends"]
    assert "local runner" in local["backends"][1], local["backends"]
    for run in (containers, local):
        assert run["settled"] == {"open": {}, "due": {}}
        assert run["compacted"], f"nothing reached the base store via {run['backends']}"
    assert containers["model"] == local["model"], "the seeded producer did not repeat itself"
    read: pa.Table = containers["read"]
    assert read.num_rows == len(local["model"]) > 0
    assert read.equals(local["read"]), "the two paths ended with different tables"
