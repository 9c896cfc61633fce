"""No single message stops a service: the largest message the broker accepts, on
every topic a service consumes, and events that disagree with the catalog, are each
parked as ONE bounded dead letter while the four services (real processes) keep
running and keep the table compacted.

The case this guards: a 600 KB message once produced a dead letter that embedded the
whole payload, JSON-escaped, over the broker's limit; the service crashed on it at
every restart and the supervisor stopped the stack.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import firn
from firn.events.commits import CommitEvent, PartitionChange
from firn.events.plans import PlanTaskEvent
from firn.kafka import Topics, ensure_topics, producer
from firn.settings import FirnSettings
from tests.integration.cdc_workload import PROPERTIES, SCHEMA, CdcProducer, wait_until_settled
from tests.integration.service_processes import running_services
from tests.waiting import messages_on

SERVICES = ["metrics", "planner", "dispatcher", "committer"]
BROKER_LIMIT = 1_048_588
"""Kafka's default ``message.max.bytes`` (a record batch), which the local broker keeps."""
LARGEST = BROKER_LIMIT - 1024
"""A value that fits in a batch of one with its key and the batch overhead."""


def _largest(event_type: str) -> bytes:
    """A message as large as the broker takes that starts like an event of that type
    and is not JSON (control bytes, which JSON escapes six-fold)."""
    head = json.dumps({"event_type": event_type, "x": ""})[:-2].encode()
    return head + b"\x01" * (LARGEST - len(head) - 2) + b'"}'


def test_the_largest_messages_and_forged_events_are_parked_and_nothing_stops(
    stack_settings: FirnSettings, tmp_path: Path, unique: str
) -> None:
    settings = stack_settings
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    poison: dict[str, bytes] = {
        topics.commits: _largest("commit"),
        topics.compactions: _largest("compaction"),
        topics.metrics_updates: _largest("reading"),
        topics.plan_requests: _largest("plan-request"),
        topics.plan_tasks: _largest("plan-task"),
        topics.task_results: _largest("task-result"),
    }
    with (
        firn.connect(settings=settings) as catalog,
        running_services(settings, tmp_path, SERVICES, FIRN_METRICS_CHECK_INTERVAL="5") as svc,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        workload = CdcProducer(table, seed=5)
        workload.run(commits=20, per_second=8, between=lambda n: svc.assert_running())

        big = producer(settings, **{"message.max.bytes": BROKER_LIMIT})
        for topic, value in poison.items():
            big.produce(topic, key=f"{table.name}/x".encode(), value=value)
        forged_commit = CommitEvent(
            table=table.name,
            table_id=table.table_id,
            seq=10**9,
            snapshot_id=10**9,  # never committed: counters must not believe it
            committed_at=dt.datetime.now(dt.UTC),
            partitions=[
                PartitionChange(
                    partition_key="day=2026-11-20",
                    partition_values={"day": "2026-11-20"},
                    insert_files=10**6,
                    delete_files=0,
                    insert_rows=1,
                    delete_rows=0,
                    insert_bytes=10**12,
                    delete_bytes=0,
                )
            ],
        )
        forged_task = PlanTaskEvent(
            table=table.name,
            table_id=table.table_id,
            partition_key="day=2026-11-20",
            plan_id=1,
            task_id=10**9,
            attempt=0,
            input_bytes=1,
        )
        big.produce(topics.commits, key=table.name.encode(), value=forged_commit.to_json())
        big.produce(topics.plan_tasks, key=b"orders/x", value=forged_task.to_json())
        assert big.flush(30) == 0, "the broker did not take the largest messages"

        workload.run(commits=60, per_second=8, between=lambda n: svc.assert_running())
        wait_until_settled(table, svc, timeout=240)
        workload.check()
        svc.assert_running()

        letters = _dead_letters(settings, topics.dlq, f"dlq-{unique}", expect=len(poison) + 2)
        by_source = {
            (letter["source_topic"], letter["payload_bytes"]): letter for letter in letters
        }
        for topic, value in poison.items():
            letter = by_source.get((topic, len(value)))
            assert letter is not None, f"no dead letter for the message on {topic}: {letters}"
            assert letter["payload_sha256"] == hashlib.sha256(value).hexdigest()
            assert "more bytes" in letter["payload"]
        reasons = " | ".join(letter["reason"] for letter in letters)
        assert "snapshot 1000000000" in reasons
        assert "task 1000000000, which does not exist" in reasons
        assert len(letters) == len(poison) + 2, "one letter per refused message, no more"


def _dead_letters(
    settings: FirnSettings, topic: str, group: str, expect: int
) -> list[dict[str, Any]]:
    """The dead letters (each checked to be small), waiting for ``expect`` and then
    a few seconds more for any extra."""
    values = [
        m.value() or b""
        for m in messages_on(settings, topic, group, expect=expect, extra_seconds=3)
    ]
    for value in values:
        assert len(value) < 64 * 1024, f"a dead letter of {len(value)} bytes"
    return [json.loads(value) for value in values]
