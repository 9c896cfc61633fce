"""The publisher service's handler and sweep (``firn_services.publisher.handlers``)
against a fake publisher: which tables it publishes, what it counts, and how one
table's failure, database weather and a long sweep are handled. No I/O."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY

from firn.errors import ConfigError, ServiceError, StorageError
from firn.events.compactions import CompactionEvent
from firn.events.wire import as_event
from firn.iceberg.properties import file_io_properties
from firn.iceberg.publisher import Publication
from firn_services.publisher.handlers import Publishing


class FakePublisher:
    """``due`` lists ``behind``; ``publish`` brings a table up to date, or raises what
    ``failures`` holds for it (once per entry)."""

    def __init__(self, behind: list[int] | None = None) -> None:
        self.behind = list(behind or [])
        self.failures: dict[int, list[BaseException]] = {}
        self.outcomes: dict[int, Publication] = {}
        self.calls: list[int] = []
        self.on_publish: Callable[[int], None] = lambda table_id: None

    def due(self) -> list[int]:
        return sorted(self.behind)

    def publish(self, table: str | int) -> Publication:
        assert isinstance(table, int)
        self.calls.append(table)
        self.on_publish(table)
        errors = self.failures.get(table)
        if errors:
            raise errors.pop(0)
        if table in self.outcomes:
            return self.outcomes[table]
        if table not in self.behind:
            return Publication(f"t{table}", "unchanged", f"t{table}")
        self.behind.remove(table)
        return Publication(
            f"t{table}",
            "published",
            f"t{table}",
            firn_snapshot=7,
            bytes_written=1000 + table,
            lag_seconds=1.5,
        )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def service(fake: FakePublisher, clock: Clock | None = None, **options: Any) -> Publishing:
    return Publishing(lambda: fake, interval=5.0, clock=clock or Clock(), **options)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def compaction_event(table_id: int) -> CompactionEvent:
    event = CompactionEvent(
        table=f"t{table_id}",
        table_id=table_id,
        partition_key="p=1",
        plan_id=3,
        kind="major",
        snapshot_id=7,
        max_merged_seq=4,
        removed_files=2,
        added_files=1,
        added_bytes=100,
        added_rows=10,
        committed_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    return event


# --- events ---------------------------------------------------------------------


def test_a_compaction_event_publishes_its_table_and_a_repeat_finds_it_unchanged() -> None:
    fake = FakePublisher(behind=[4])
    publishing = service(fake)
    published = sample("firn_publications_total", outcome="published")
    unchanged = sample("firn_publications_total", outcome="unchanged")
    lag = sample("firn_publication_lag_seconds_count", table="t4")
    written = sample("firn_publication_bytes_total", table="t4")

    publishing.compaction(compaction_event(4))
    publishing.compaction(compaction_event(4))  # a redelivery

    assert fake.calls == [4, 4]
    assert sample("firn_publications_total", outcome="published") == published + 1
    assert sample("firn_publications_total", outcome="unchanged") == unchanged + 1
    assert sample("firn_publication_lag_seconds_count", table="t4") == lag + 1
    assert sample("firn_publication_bytes_total", table="t4") == written + 1004


def test_the_lag_lands_in_the_buckets_around_the_ten_second_goal() -> None:
    fake = FakePublisher(behind=[5])
    before = sample("firn_publication_lag_seconds_bucket", table="t5", le="2.0")
    service(fake).compaction(compaction_event(5))  # lag 1.5 s
    assert sample("firn_publication_lag_seconds_bucket", table="t5", le="2.0") == before + 1
    assert sample("firn_publication_lag_seconds_bucket", table="t5", le="1.0") == 0
    assert sample("firn_publication_lag_seconds_bucket", table="t5", le="10.0") == before + 1


def test_an_invalid_event_is_refused_for_the_dead_letter_topic() -> None:
    fake = FakePublisher(behind=[4])
    raw = compaction_event(4).model_dump(mode="json")
    del raw["table_id"]
    with pytest.raises(ConfigError):
        service(fake).compaction(as_event(raw))  # as the consume loop reads it
    assert fake.calls == []


def test_a_table_that_fails_is_logged_and_counted_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakePublisher(behind=[4])
    fake.failures[4] = [StorageError("disk full", retryable=False)]
    before = sample("firn_publication_errors_total", error="StorageError")
    service(fake).compaction(compaction_event(4))  # not raised: the event is done
    assert sample("firn_publication_errors_total", error="StorageError") == before + 1
    assert "[table=4] publication failed" in caplog.text
    assert "disk full" in caplog.text


@pytest.mark.parametrize(
    "weather",
    [
        psycopg.OperationalError("the database system is shutting down"),
        ServiceError("cannot connect to Postgres: refused"),
    ],
)
def test_database_weather_is_raised_for_the_loop_to_retry(weather: BaseException) -> None:
    fake = FakePublisher(behind=[4])
    fake.failures[4] = [weather]
    publishing = service(fake)
    before = sample("firn_publication_errors_total", error=type(weather).__name__)
    with pytest.raises(type(weather)):
        publishing.compaction(compaction_event(4))
    # Not one table's error: the message in hand is retried, and it then succeeds.
    assert sample("firn_publication_errors_total", error=type(weather).__name__) == before
    publishing.compaction(compaction_event(4))
    assert fake.behind == []


def test_a_retryable_storage_error_belongs_to_its_table() -> None:
    fake = FakePublisher(behind=[4, 5])
    fake.failures[4] = [StorageError("S3 throttled")]  # retryable, but not the database
    assert [p.table for p in service(fake).sweep()] == ["t5"]
    assert fake.calls == [4, 5]


# --- the sweep ------------------------------------------------------------------


def test_the_sweep_publishes_every_table_that_is_behind() -> None:
    fake = FakePublisher(behind=[3, 1, 2])
    done = service(fake).sweep()
    assert [(p.table, p.outcome) for p in done] == [
        ("t1", "published"),
        ("t2", "published"),
        ("t3", "published"),
    ]
    assert fake.behind == []


def test_one_failing_table_does_not_stop_the_others() -> None:
    fake = FakePublisher(behind=[1, 2, 3])
    fake.failures[2] = [RuntimeError("a bug in one table's publication")]
    done = service(fake).sweep()
    assert [p.table for p in done] == ["t1", "t3"]
    assert fake.behind == [2]


def test_a_failing_table_waits_longer_after_each_failure_then_recovers() -> None:
    clock = Clock()
    fake = FakePublisher(behind=[1, 2])
    fake.failures[2] = [ConfigError(f"broken {n}") for n in range(4)]
    publishing = service(fake, clock, retry_cap=12.0)

    def tried() -> list[int]:
        fake.calls.clear()
        publishing.sweep()
        return fake.calls

    assert tried() == [1, 2]  # fails once: waits 5 s
    clock.now += 4.9
    assert tried() == []
    clock.now += 0.1
    assert tried() == [2]  # fails twice: waits 10 s
    clock.now += 9.9
    assert tried() == []
    clock.now += 0.1
    assert tried() == [2]  # three times: 20 s, capped at 12
    clock.now += 12
    assert tried() == [2]  # four times
    clock.now += 12
    assert tried() == [2]  # published at last
    assert fake.behind == []
    clock.now += 0.1
    fake.behind.append(2)
    assert tried() == [2]  # no longer waiting


def test_an_event_tries_a_failing_table_at_once() -> None:
    clock = Clock()
    fake = FakePublisher(behind=[2])
    fake.failures[2] = [ConfigError("broken")]
    publishing = service(fake, clock)
    publishing.sweep()
    publishing.compaction(compaction_event(2))  # a new snapshot: worth a try
    assert fake.calls == [2, 2]
    assert fake.behind == []


def test_database_weather_ends_the_sweep_for_its_next_turn() -> None:
    fake = FakePublisher(behind=[1, 2, 3])
    fake.failures[2] = [psycopg.OperationalError("terminating connection")]
    publishing = service(fake)
    with pytest.raises(psycopg.OperationalError):
        publishing.sweep()
    assert fake.calls == [1, 2]
    publishing.sweep()  # the next turn: nothing waits, the database is back
    assert fake.behind == []


def test_a_long_sweep_stops_at_its_budget_and_the_next_goes_on_from_there() -> None:
    clock = Clock()
    fake = FakePublisher(behind=[1, 2, 3, 4])

    def slow(table_id: int) -> None:
        clock.now += 25

    fake.on_publish = slow
    publishing = service(fake, clock, sweep_budget=60.0)
    assert [p.table for p in publishing.sweep()] == ["t1", "t2", "t3"]
    fake.behind.append(1)  # behind again: still after the ones not reached
    assert [p.table for p in publishing.sweep()] == ["t4", "t1"]


def test_other_outcomes_are_counted_and_nothing_is_observed_as_lag() -> None:
    fake = FakePublisher(behind=[1, 2, 3])
    fake.outcomes = {
        1: Publication("t1", "busy", "t1", message="another publisher has it"),
        2: Publication("t2", "refused", "", message="a..b has no Iceberg identifier"),
        3: Publication("t3", "disabled", "t3", message="iceberg.publish is false"),
    }
    counts = {
        o: sample("firn_publications_total", outcome=o) for o in ("busy", "refused", "disabled")
    }
    lag = sum(sample("firn_publication_lag_seconds_count", table=f"t{n}") for n in (1, 2, 3))
    done = service(fake).sweep()
    assert [p.outcome for p in done] == ["busy", "refused", "disabled"]
    for outcome, count in counts.items():
        assert sample("firn_publications_total", outcome=outcome) == count + 1
    assert sum(sample("firn_publication_lag_seconds_count", table=f"t{n}") for n in (1, 2, 3)) == (
        lag
    )


# --- reaching the warehouse -----------------------------------------------------


def test_file_io_properties_carry_an_s3_warehouse_options_to_pyiceberg() -> None:
    assert file_io_properties("/srv/warehouse") == {}
    assert file_io_properties("s3://lake/firn") == {}
    assert file_io_properties(
        "s3://lake/firn?region=eu-west-1&endpoint_override=127.0.0.1:9000&scheme=http"
        "&access_key=AK&secret_key=SK"
    ) == {
        "s3.region": "eu-west-1",
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK",
    }
    assert file_io_properties("s3://lake?endpoint_override=minio:9000") == {
        "s3.endpoint": "https://minio:9000"
    }


def test_events_within_the_min_interval_are_left_to_the_next_sweep() -> None:
    """A table published less than ``min_interval`` ago is not published again by an
    event: the sweep publishes it once, with every compaction in between. Past the
    interval an event publishes at once again; other tables are not held back."""
    fake = FakePublisher(behind=[4, 6])
    clock = Clock()
    publishing = service(fake, clock, min_interval=5.0)
    deferred = sample("firn_publications_total", outcome="deferred")

    publishing.compaction(compaction_event(4))
    fake.behind.append(4)  # another partition of table 4 compacts
    clock.now += 1.0
    publishing.compaction(compaction_event(4))
    publishing.compaction(compaction_event(6))
    assert fake.calls == [4, 6]
    assert sample("firn_publications_total", outcome="deferred") == deferred + 1

    swept = publishing.sweep()
    assert [(p.table, p.outcome) for p in swept] == [("t4", "published")]
    clock.now += 5.0
    fake.behind.append(4)
    publishing.compaction(compaction_event(4))
    assert fake.calls == [4, 6, 4, 4]


def test_a_table_only_found_unchanged_is_not_held_back() -> None:
    fake = FakePublisher(behind=[])
    publishing = service(fake, min_interval=5.0)
    publishing.compaction(compaction_event(4))  # unchanged: nothing was published
    publishing.compaction(compaction_event(4))
    assert fake.calls == [4, 4]


def test_an_event_publishes_its_table_after_gathering_the_compactions_that_follow() -> None:
    """With ``gather``, an event's table is published that long after it, once for
    every compaction that lands meanwhile; other tables wait for their own events;
    a table published within ``min_interval`` is still left to the sweep, and the
    sweep runs from ``idle`` every ``interval`` seconds."""
    fake = FakePublisher(behind=[4, 6])
    clock = Clock()
    publishing = service(fake, clock, gather=1.0, min_interval=5.0)
    deferred = sample("firn_publications_total", outcome="deferred")

    publishing.compaction(compaction_event(4))
    clock.now += 0.3
    publishing.compaction(compaction_event(4))  # the table's next partition
    clock.now += 0.2
    publishing.compaction(compaction_event(6))
    publishing.idle()
    assert fake.calls == []
    assert sample("firn_publications_total", outcome="deferred") == deferred + 3

    clock.now += 0.5
    publishing.idle()
    assert fake.calls == [4]  # a second after its first event
    clock.now += 0.5
    publishing.idle()
    publishing.idle()
    assert fake.calls == [4, 6]

    fake.behind.append(4)
    publishing.compaction(compaction_event(4))  # published 1 s ago: the sweep's
    clock.now += 1.0
    publishing.idle()
    assert fake.calls == [4, 6]
    clock.now += 3.0  # five seconds since the service began
    publishing.idle()
    assert fake.calls == [4, 6, 4]


def test_a_gathered_table_is_kept_through_database_weather() -> None:
    fake = FakePublisher(behind=[4])
    clock = Clock()
    publishing = service(fake, clock, gather=1.0)
    fake.failures[4] = [psycopg.OperationalError("terminating connection")]
    publishing.compaction(compaction_event(4))
    clock.now += 1.0
    with pytest.raises(psycopg.OperationalError):
        publishing.idle()
    publishing.idle()  # the loop's next turn
    assert fake.calls == [4, 4]
    assert fake.behind == []
    publishing.idle()
    assert fake.calls == [4, 4]
