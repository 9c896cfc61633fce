"""A faust-streaming agent consuming from and producing to the real broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from firn.kafka import consumer, ensure_topics, producer
from firn.settings import FirnSettings
from firn_localstack.processes import free_port

REPO = Path(__file__).resolve().parents[2]


def test_faust_agent_round_trip(settings: FirnSettings, unique: str, tmp_path: Path) -> None:
    topic_in, topic_out = f"echo-in-{unique}", f"echo-out-{unique}"
    # Faust ignores subscribed topics that do not exist yet, so create them first.
    ensure_topics(settings, (topic_in, topic_out), partitions=1)
    env = {
        **os.environ,
        "ECHO_BROKER": settings.kafka_servers(),
        "ECHO_IN": topic_in,
        "ECHO_OUT": topic_out,
        "ECHO_GROUP": f"echo-{unique}",
        "ECHO_DATADIR": str(tmp_path / "faust"),
    }
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faust",
                "-A",
                "tests.integration.faust_echo_app",
                "worker",
                "-l",
                "warn",
                # The faust CLI binds its web server even with web_enabled=False; its
                # default port 6066 is also the Spark master's REST port.
                "--web-port",
                str(free_port()),
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    reader = consumer(settings, group_id=f"reader-{unique}")
    try:
        reader.subscribe([topic_out])
        out = producer(settings)
        got: bytes | None = None
        deadline = time.monotonic() + 90
        next_send = 0.0
        # The agent joins its group a few seconds after start; keep offering input
        # until its first echo comes back.
        while got is None and time.monotonic() < deadline:
            assert worker.poll() is None, log_path.read_text()
            if time.monotonic() >= next_send:
                out.produce(topic_in, value=f"ping-{unique}".encode())
                out.flush(10)
                next_send = time.monotonic() + 3
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                got = message.value()
    finally:
        reader.close()
        worker.terminate()
        worker.wait(30)
    assert got == f"echo:ping-{unique}".encode(), log_path.read_text()
