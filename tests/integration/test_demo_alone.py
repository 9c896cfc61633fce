"""``firn demo``, the demo producer alone, run as docker-compose runs it: a process
given only the stack's addresses in its environment, stopped by SIGTERM (``docker
compose stop``) or its duration, ending with the summary."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import firn
from firn.kafka import Topics, admin_client
from firn.settings import FirnSettings

from .service_processes import REPO, service_env

DEMO = ["--rate", "10", "--keys", "200", "--batch", "20", "--seed", "5"]


def firn_demo(settings: FirnSettings, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "firn", "demo", "--json", *DEMO, *argv],
        cwd=REPO,
        env=service_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def summary(stdout: str) -> dict[str, object]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert lines[-1]["event"] == "summary", lines[-1]
    assert all(line["event"] == "progress" for line in lines[:-1])
    last: dict[str, object] = lines[-1]
    return last


def test_the_producer_alone_commits_and_checks_the_table(
    stack_settings: FirnSettings,
) -> None:
    demo = firn_demo(stack_settings, "--duration", "2")
    stdout, stderr = demo.communicate(timeout=120)
    assert demo.returncode == 0, stderr
    result = summary(stdout)
    assert result["ok"] is True
    assert isinstance(result["commits"], int)
    assert result["commits"] > 0
    assert result["rows"] == result["commits"] * 20
    # Only the producer is measured: the services run elsewhere, and no idle window.
    resources = result["resources"]
    assert isinstance(resources, dict)
    assert resources["idle"] is None
    assert set(resources["load"]["processes"]) == {"producer"}

    with firn.connect(settings=stack_settings) as catalog:
        table = catalog.table("demo.orders")
        assert table.read().num_rows == result["live_rows"]
    # No service ran: the producer made the commit topic, as a service would have.
    commits = Topics.from_settings(stack_settings).commits
    topic = admin_client(stack_settings).list_topics(commits, timeout=30).topics[commits]
    assert len(topic.partitions) == stack_settings.topic_partitions > 1


def test_sigterm_stops_the_producer_with_its_summary(stack_settings: FirnSettings) -> None:
    demo = firn_demo(stack_settings)
    assert demo.stdout is not None
    first = demo.stdout.readline()  # shown after the first commit: it is producing
    assert json.loads(first)["event"] == "progress"
    demo.send_signal(signal.SIGTERM)
    stdout, stderr = demo.communicate(timeout=120)
    assert demo.returncode == 0, stderr
    result = summary(first + stdout)
    assert result["ok"] is True
    assert isinstance(result["commits"], int)
    assert result["commits"] > 0
