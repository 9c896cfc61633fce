"""More than one member of every service for ``bench/fleet.py --members N``: each
service's extra members run beside the `firn up` stack's own (``firn service NAME``,
in the stack's environment), and the run reports how the work spread over them: the
partitions of its topics each member of a consumer group holds, each member's CPU,
and the compaction tasks each dispatcher member ran."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from firn.kafka.clients import admin_client, consumer
from firn.kafka.topics import Topics
from firn.postgres.connection import Connection
from firn.postgres.registry import live_instances
from firn.settings import FirnSettings

SERVICES = ("metrics", "planner", "dispatcher", "committer", "publisher")
MEMBERS_FILE = "members.json"
"""The extra members' pids, by name (``dispatcher-2``), beside the stack's state."""
CONNECT_TIMEOUT = 180.0


class ExtraMembers:
    """Members 2..N of every service, started and stopped together."""

    def __init__(self, home: Path, members: int, env: dict[str, str]) -> None:
        self.home, self.members, self.env = home, members, env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, conn: Connection) -> None:
        firn = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "firn"
        for name in SERVICES:
            for k in range(2, self.members + 1):
                log = (self.home / f"{name}-{k}.log").open("wb")
                self.procs[f"{name}-{k}"] = subprocess.Popen(
                    [str(firn), "service", name], env=self.env, stdout=log, stderr=log
                )
        (self.home / MEMBERS_FILE).write_text(
            json.dumps({name: proc.pid for name, proc in self.procs.items()})
        )
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while time.monotonic() < deadline:
            exited = [name for name, proc in self.procs.items() if proc.poll() is not None]
            if exited:
                raise RuntimeError(f"extra members {exited} exited; see {self.home}/*-N.log")
            live = live_instances(conn, within_seconds=CONNECT_TIMEOUT)
            if all(live.get(name, 0) >= self.members for name in SERVICES):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the extra members did not all connect in {CONNECT_TIMEOUT:.0f}s")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def member_pids(home: Path) -> dict[str, int]:
    """The extra members' pids, by name; none without ``--members``."""
    try:
        loaded: dict[str, int] = json.loads((home / MEMBERS_FILE).read_text())
        return loaded
    except (OSError, ValueError):
        return {}


def group_members(settings: FirnSettings) -> dict[str, list[dict[str, Any]]]:
    """Each service's consumer group as the broker has it now: for every member, the
    topic partitions assigned to it."""
    groups = {f"{settings.topic_prefix}{name}": name for name in SERVICES}
    admin = admin_client(settings)  # held until the answers are in: its futures need it
    described = admin.describe_consumer_groups(list(groups), request_timeout=30)
    found: dict[str, list[dict[str, Any]]] = {}
    for group, future in described.items():
        try:
            description = future.result(timeout=30)
        except Exception as exc:  # a group the broker does not know is reported, not fatal
            found[groups[group]] = [{"error": f"{type(exc).__name__}: {exc}"}]
            continue
        found[groups[group]] = sorted(
            (
                {
                    "client_id": member.client_id,
                    "partitions": sorted(
                        f"{tp.topic}[{tp.partition}]" for tp in member.assignment.topic_partitions
                    ),
                }
                for member in description.members
            ),
            key=lambda m: m["partitions"],
        )
    return found


def topic_events(settings: FirnSettings) -> dict[str, int]:
    """Events each Firn topic holds now (the sum of its partitions' offset ranges):
    how many plan requests, task announcements and results the fleet cost."""
    reader = consumer(settings, f"{settings.topic_prefix}bench-watermarks")
    try:
        found: dict[str, int] = {}
        for topic in Topics.from_settings(settings).all():
            described = reader.list_topics(topic, timeout=30).topics.get(topic)
            if described is None or described.error is not None:
                continue
            total = 0
            for partition in described.partitions:
                low, high = reader.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=30
                )
                total += high - low
            found[topic.removeprefix(settings.topic_prefix)] = total
        return found
    finally:
        reader.close()


def tasks_by_member(conn: Connection) -> dict[str, int]:
    """Task claims per dispatcher process, by pid, from the task state machine's
    transitions (a claim's reason is ``claimed by dispatcher-HOST-PID-SUFFIX``)."""
    rows = conn.execute(
        "SELECT substr(reason, length('claimed by ') + 1), count(*) FROM state_transition "
        "WHERE machine = 'task' AND to_state = 'Executing' AND reason LIKE 'claimed by %%' "
        "GROUP BY 1"
    ).fetchall()
    counts: Counter[str] = Counter()
    for owner, count in rows:
        counts[str(owner).rsplit("-", 2)[-2]] += int(count)
    return dict(counts)


def spread(
    home: Path, stack_pids: dict[str, int], cores: dict[str, float], tasks: dict[str, int]
) -> dict[str, list[dict[str, Any]]]:
    """Per service, each member's cores while producing and (dispatchers) tasks run."""
    pids = {**{n: p for n, p in stack_pids.items() if n in SERVICES}, **member_pids(home)}
    by_service: dict[str, list[dict[str, Any]]] = {name: [] for name in SERVICES}
    for name, pid in sorted(pids.items()):
        service = name.split("-")[0]
        member: dict[str, Any] = {"member": name, "pid": pid, "cores": cores.get(name)}
        if service == "dispatcher":
            member["tasks"] = tasks.get(str(pid), 0)
        by_service[service].append(member)
    return by_service
