"""docker-compose.yml on a real Docker engine, with the images deploy/images/build.sh
makes here (Docker Hub is out of reach): Postgres, Kafka, the five services (three
dispatchers and two committers, by ``--scale``) and the demo producer come up, the
demo's table equals its model, the work is spread over the replicas of each consumer
group with no plan committed twice, the warehouse is readable on the host, Postgres
refuses a login without TLS and Kafka a client without SASL, and ``down`` leaves
nothing behind.

``make test-docker`` runs it (so does CI), and it fails, not skips, when Docker does
not answer.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from firn_localstack.processes import free_port
from tests.integration.cdc_workload import assert_committed_once

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def compose(images: dict[str, str], tmp_path: Path) -> Iterator[tuple[list[str], dict[str, str]]]:
    project = f"firn-test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        **images,
        "FIRN_COMPOSE_KAFKA_PORT": str(free_port()),
        "FIRN_COMPOSE_POSTGRES_PORT": str(free_port()),
        "FIRN_WAREHOUSE_DIR": str(tmp_path / "warehouse"),
        "FIRN_DEMO_RATE": "4",
    }
    base = ["docker", "compose", "-p", project, "--profile", "demo"]
    try:
        yield base, env
    finally:
        run(*base, "down", "-v", "--remove-orphans", env=env, timeout=180)
        left = run(
            "docker",
            "ps",
            "-aq",
            "--filter",
            f"label=com.docker.compose.project={project}",
            env=env,
        )
        assert left.strip() == "", f"containers of {project} left after down: {left}"


# The demo commits for at least this long; then the test waits, up to SPREAD_DEADLINE
# from `up`, for every replica to have done its share (a slow machine spends most of a
# minute starting five Python services and settling two consumer groups).
DEMO_AT_LEAST = 45.0
SPREAD_DEADLINE = 240.0
COMMITTED = re.compile(r"(committer-\d+)\s*\|.*?\[plan=(\d+)\] committed as")


def spread(
    base: list[str], env: dict[str, str], url: str
) -> tuple[list[tuple[str, str]], set[str]]:
    """(committer, plan) per committed plan from the committers' logs, and the
    dispatchers that claimed a task (the owner the catalog recorded on Pending ->
    Executing)."""
    logs = run(*base, "logs", "--no-color", "committer", env=env)
    committed: list[tuple[str, str]] = COMMITTED.findall(logs)
    with psycopg.connect(url) as conn:
        conn.execute("SET search_path TO firn")
        try:
            owners = conn.execute(
                "SELECT DISTINCT split_part(reason, ' ', 3) FROM state_transition "
                "WHERE machine = 'task' AND to_state = 'Executing'"
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            owners = []  # the catalog's migrations have not run yet
    return committed, {owner for (owner,) in owners}


def test_compose_runs_the_stack_scaled_and_the_demo_equals_its_model(
    compose: tuple[list[str], dict[str, str]],
) -> None:
    base, env = compose
    url = f"postgresql://firn:firn@127.0.0.1:{env['FIRN_COMPOSE_POSTGRES_PORT']}/firn"
    started = time.monotonic()
    run(*base, "up", "-d", "--scale", "dispatcher=3", "--scale", "committer=2", env=env)
    time.sleep(DEMO_AT_LEAST)  # the demo producer commits meanwhile; compactions follow
    # Each consumer group spreads its work: every dispatcher runs tasks and both
    # committers commit plans. Wait for that (not a fixed time) while the demo goes on.
    while True:
        committed, owners = spread(base, env, url)
        done = len({name for name, _ in committed}) == 2 and len(owners) == 3
        if done or time.monotonic() - started > SPREAD_DEADLINE:
            break
        time.sleep(5)
    run(*base, "stop", "demo", env=env)  # SIGTERM: it stops producing and checks
    summary = run(*base, "logs", "--no-log-prefix", "demo", env=env)
    assert "model check  read() equals the reference model" in summary, summary[-3000:]
    exit_code = run(
        "docker", "inspect", "--format", "{{.State.ExitCode}}", f"{base[3]}-demo-1", env=env
    )
    assert exit_code.strip() == "0", summary[-3000:]
    # It ran as the producer principal, over TLS: no refusal on the way.
    assert "AUTHORIZATION_FAILED" not in summary

    committed, owners = spread(base, env, url)
    by_committer = Counter(name for name, _ in committed)
    plans = [plan for _, plan in committed]
    services = run(
        *base, "logs", "--no-color", "--tail", "30", "planner", "dispatcher", "committer", env=env
    )
    assert len(by_committer) == 2, f"not both committers committed: {by_committer}\n{services}"
    assert len(plans) == len(set(plans)), "a plan was committed twice"
    assert len(owners) == 3, f"not every dispatcher ran tasks: {owners}\n{services}"
    # Each committed plan is in exactly one compaction snapshot, the one its row names
    # (a table's plans ready at once share one).
    with psycopg.connect(url) as conn:
        conn.execute("SET search_path TO firn")
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT DISTINCT table_id FROM compaction_plan WHERE state = 'Committed'"
            )
        ]
        assert tables, "no plan was committed"
        for table_id in tables:
            assert_committed_once(conn, table_id)

    # Nothing in the clear, nobody anonymous: Postgres refuses a login without TLS
    # (its TLS one above succeeded), Kafka's host listener anyone without SASL.
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(url + "?sslmode=disable", connect_timeout=10).close()
    anonymous = AdminClient({"bootstrap.servers": f"127.0.0.1:{env['FIRN_COMPOSE_KAFKA_PORT']}"})
    with pytest.raises(KafkaException):
        anonymous.list_topics(timeout=5)

    # The warehouse is the host's directory: the demo table's Parquet files are there.
    warehouse = Path(env["FIRN_WAREHOUSE_DIR"])
    assert list(warehouse.rglob("*.parquet")), f"no table files under {warehouse}"
