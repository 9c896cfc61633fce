"""Where a compaction cycle's time goes, from the record timestamps of the stack's topics.

Run it against a stack that is working (``firn up --demo --rate 10`` in another
terminal, or any stack: ``FIRN_KAFKA_BOOTSTRAP`` and ``FIRN_TOPIC_PREFIX`` as for the
services). It reads every topic up to its current end (nothing is consumed for a
group) and prints, per hop, the median and p90 over the cycles found:

    compaction -> its reading update      the metrics service reads the compacted partition
    reading update -> plan request        the partition waits until its triggers fire again
    plan request -> first plan-task       the planner plans and announces
    first plan-task -> last task-result   the dispatcher claims and runs the tasks
    last task-result -> compaction event  the committer commits the plan

The second hop is the trigger's wait (runs accumulating up to ``minor.file-count``),
not machinery; the others are the cycle's own cost.

    .venv/bin/python bench/cycle.py [--json FILE]
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from firn.kafka import Topics
from firn.kafka.clients import consumer_config
from firn.settings import FirnSettings

Record = tuple[float, dict[str, Any]]


def read_all(settings: FirnSettings, topics: Sequence[str]) -> dict[str, list[Record]]:
    """Every record of ``topics`` up to their end now: (timestamp s, decoded value)."""
    reader = Consumer(consumer_config(settings, f"{settings.topic_prefix}bench-cycle"))
    metadata = reader.list_topics(timeout=10)
    ends: dict[tuple[str, int], int] = {}
    starts = []
    for topic in topics:
        for partition in metadata.topics[topic].partitions if topic in metadata.topics else []:
            low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                starts.append(TopicPartition(topic, partition, low))
                ends[(topic, partition)] = high
    reader.assign(starts)
    found: dict[str, list[Record]] = collections.defaultdict(list)
    while ends:
        for message in reader.consume(1000, 2.0):
            where = (message.topic(), message.partition())
            if message.error() is not None or where not in ends:
                continue
            try:
                value = json.loads(message.value())
            except ValueError:
                value = {}
            found[where[0]].append((message.timestamp()[1] / 1000, value))
            if message.offset() + 1 >= ends[where]:
                del ends[where]
    reader.close()
    return found


def hops(found: Mapping[str, list[Record]], topics: Topics) -> dict[str, list[float]]:
    """Seconds per hop of every cycle found (see the module's docstring)."""

    def by_partition(topic: str, kinds: set[str] | None = None) -> dict[str, list[float]]:
        out: dict[str, list[float]] = collections.defaultdict(list)
        for at, value in found.get(topic, []):
            if kinds is None or value.get("kind") in kinds:
                out[value.get("partition_key", "")].append(at)
        return {key: sorted(times) for key, times in out.items()}

    def next_after(times: list[float], at: float) -> float | None:
        i = bisect.bisect_left(times, at)
        return times[i] if i < len(times) else None

    compactions = by_partition(topics.compactions)
    readings = by_partition(topics.metrics_updates, {"reading"})
    requests = by_partition(topics.plan_requests)
    announced = by_partition(topics.plan_tasks)
    out: dict[str, list[float]] = collections.defaultdict(list)
    for partition, times in compactions.items():
        for at in times:
            reading = next_after(readings.get(partition, []), at)
            request = next_after(requests.get(partition, []), at)
            if reading is not None:
                out["compaction -> its reading update"].append(reading - at)
                if request is not None and request >= reading:
                    out["reading update -> plan request"].append(request - reading)
    for partition, times in requests.items():
        for at in times:
            task = next_after(announced.get(partition, []), at)
            if task is not None:
                out["plan request -> first plan-task"].append(task - at)
    tasks: dict[int, list[float]] = collections.defaultdict(list)
    results: dict[int, list[float]] = collections.defaultdict(list)
    committed: dict[int, float] = {}
    for at, value in found.get(topics.plan_tasks, []):
        tasks[value.get("plan_id", -1)].append(at)
    for at, value in found.get(topics.task_results, []):
        results[value.get("plan_id", -1)].append(at)
    for at, value in found.get(topics.compactions, []):
        committed[value.get("plan_id", -1)] = at
    for plan, times in tasks.items():
        if plan in results and plan in committed:
            out["first plan-task -> last task-result"].append(max(results[plan]) - min(times))
            out["last task-result -> compaction event"].append(committed[plan] - max(results[plan]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the per-hop figures to this file")
    args = parser.parse_args()
    settings = FirnSettings()
    if settings.kafka_bootstrap is None:  # the local stack's broker, as `firn up` runs it
        settings = settings.model_copy(update={"kafka_bootstrap": "127.0.0.1:19092"})
    topics = Topics.from_settings(settings)
    names = (topics.metrics_updates, topics.plan_requests, topics.plan_tasks)
    found = read_all(settings, (*names, topics.task_results, topics.compactions))
    report = {}
    for hop, seconds in hops(found, topics).items():
        seconds.sort()
        report[hop] = {
            "cycles": len(seconds),
            "median_ms": round(statistics.median(seconds) * 1000),
            "p90_ms": round(seconds[int(len(seconds) * 0.9)] * 1000),
        }
        figures = report[hop]
        print(
            f"{hop:38s} {figures['cycles']:5d} cycles  median {figures['median_ms']:6d} ms"
            f"  p90 {figures['p90_ms']:6d} ms"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
