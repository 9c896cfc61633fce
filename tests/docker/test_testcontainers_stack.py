"""Firn's stack as testcontainers (``firn_localstack.containers``), the way the
Docker guide's "Testing your pipeline against Firn with testcontainers" shows a user: a
producer on the host commits to a table while the five services run in containers,
and the table ends equal to its model, compacted, with no plan committed twice.

Run by ``make test-docker`` with the images ``make images`` builds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import firn
from firn_localstack.containers import FirnContainers, firn_containers
from tests.integration.cdc_workload import (
    PROPERTIES,
    SCHEMA,
    CdcProducer,
    assert_committed_once,
    wait_until_settled,
)


@pytest.fixture
def stack() -> Iterator[FirnContainers]:
    with firn_containers() as running:
        yield running


def test_a_table_committed_from_the_host_is_compacted_by_the_containers(
    stack: FirnContainers,
) -> None:
    with firn.connect(settings=stack.settings) as catalog:
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        workload = CdcProducer(table, seed=5)
        workload.run(commits=60, per_second=8, between=lambda n: stack.assert_running())
        wait_until_settled(table, stack, timeout=180)
        workload.check()
        assert_committed_once(catalog.conn, table.table_id)
        stores = {r["store"] for r in table.files().to_pylist()}
        assert "base" in stores, "nothing was compacted into the base store"
        stack.assert_running()
