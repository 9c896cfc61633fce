"""The catalogs Spark reads are planned with (``firn.spark.catalogs``): kept from one read
to the next per settings and environment, one borrower at a time, at most ``IDLE_MOST``
idle, closed after a step that raised, opened anew when a kept one's connection died
while idle, and never used across a fork. Catalogs are fakes here; the Spark suites
plan every read through the real ones."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest

from firn.spark import catalogs

SETTINGS = {"database_url": "postgresql://catalog/one", "database_schema": "s"}


class FakeCatalog:
    numbers = itertools.count()

    def __init__(self, settings: Mapping[str, str], broken: bool = False) -> None:
        self.number = next(self.numbers)
        self.settings = dict(settings)
        self.broken = broken
        self.closed = False

    def table(self, name: str) -> Any:
        assert not self.closed, "a closed catalog was lent"
        if self.broken:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        if name == "missing":
            raise KeyError(name)
        return (self, name)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeCatalog]]:
    """Every catalog the module opens, in order; none kept before or after the test."""
    made: list[FakeCatalog] = []

    def open_fake(settings: Mapping[str, str]) -> FakeCatalog:
        made.append(FakeCatalog(settings))
        return made[-1]

    catalogs.close_kept()
    monkeypatch.setattr(catalogs, "_open", open_fake)
    monkeypatch.delenv("FIRN_DATABASE_SCHEMA", raising=False)
    yield made
    catalogs.close_kept()


def catalog_of(table: Any) -> FakeCatalog:
    found: FakeCatalog = table[0]
    return found


def test_a_second_read_with_the_same_settings_takes_the_kept_catalog(
    opened: list[FakeCatalog],
) -> None:
    with catalogs.table_for_read(SETTINGS, "t") as table:
        first = catalog_of(table)
    with catalogs.table_for_read(dict(reversed(list(SETTINGS.items()))), "u") as table:
        assert catalog_of(table) is first
    assert len(opened) == 1
    assert not first.closed


def test_other_settings_or_firn_variables_get_a_catalog_of_their_own(
    opened: list[FakeCatalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    with catalogs.table_for_read(SETTINGS, "t"):
        pass
    with catalogs.table_for_read({**SETTINGS, "database_schema": "other"}, "t") as table:
        assert catalog_of(table) is opened[1]
    monkeypatch.setenv("FIRN_DATABASE_SCHEMA", "from-the-environment")
    with catalogs.table_for_read(SETTINGS, "t") as table:
        assert catalog_of(table) is opened[2]
    monkeypatch.delenv("FIRN_DATABASE_SCHEMA")
    with catalogs.table_for_read(SETTINGS, "t") as table:
        assert catalog_of(table) is opened[0]
    assert len(opened) == 3


def test_reads_planned_at_once_each_borrow_a_catalog_and_few_stay_idle(
    opened: list[FakeCatalog],
) -> None:
    with (
        catalogs.table_for_read(SETTINGS, "a") as a,
        catalogs.table_for_read(SETTINGS, "b") as b,
        catalogs.table_for_read(SETTINGS, "c") as c,
    ):
        assert len({catalog_of(a), catalog_of(b), catalog_of(c)}) == 3
    # Past IDLE_MOST in all, the catalogs used longest ago are closed.
    for n in range(catalogs.IDLE_MOST + 2):
        with catalogs.table_for_read({**SETTINGS, "database_schema": f"s{n}"}, "t"):
            pass
    idle = [c for c in opened if not c.closed]
    assert len(idle) == catalogs.IDLE_MOST
    assert idle == opened[-catalogs.IDLE_MOST :]


def test_a_step_that_raises_closes_its_catalog(opened: list[FakeCatalog]) -> None:
    with pytest.raises(RuntimeError), catalogs.table_for_read(SETTINGS, "t"):
        raise RuntimeError("the planning failed")
    assert opened[0].closed
    # The lookup itself: a table that is not there.
    with pytest.raises(KeyError), catalogs.table_for_read(SETTINGS, "missing"):
        pass
    assert opened[1].closed
    with catalogs.table_for_read(SETTINGS, "t") as table:
        assert catalog_of(table) is opened[2]


def test_a_kept_catalog_whose_connection_died_is_replaced_and_the_read_goes_on(
    opened: list[FakeCatalog],
) -> None:
    with catalogs.table_for_read(SETTINGS, "t"):
        pass
    opened[0].broken = True  # Postgres restarted while it was idle
    with catalogs.table_for_read(SETTINGS, "t") as table:
        assert catalog_of(table) is opened[1]
    assert opened[0].closed
    assert not opened[1].closed


def test_a_forked_process_uses_none_of_its_parents_catalogs(
    opened: list[FakeCatalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    with catalogs.table_for_read(SETTINGS, "t"):
        pass
    monkeypatch.setattr(catalogs.os, "getpid", lambda: -1)  # as in a child after fork
    with catalogs.table_for_read(SETTINGS, "t") as table:
        assert catalog_of(table) is opened[1]
    assert not opened[0].closed  # the parent's, left to the parent
