"""``firn up`` starts Postgres, Kafka and the five services; ``firn down`` and Ctrl-C
stop every process it started, leaving no orphans."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from firn.kafka.acls import ROLES
from firn_localstack.supervisor import SERVICES
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home() -> Iterator[Path]:
    path = REPO / ".firn" / f"test-up-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRN_")}
    # Free ports, a private home, the shared jar cache through a symlink.
    (home / "cache").symlink_to(REPO / ".firn" / "cache")
    # No /metrics servers: the default ports may be taken by a stack running beside.
    quiet = {f"FIRN_{name.upper()}_PROMETHEUS_PORT": "0" for name in SERVICES}
    return {
        **env,
        **quiet,
        "FIRN_DASHBOARD_PORT": str(_free_port()),
        "FIRN_HOME": str(home),
        "FIRN_KAFKA_PORT": "0",
        "FIRN_POSTGRES_PORT": "0",
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _firn(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "firn", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _start_up(home: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], dict]:
    with open(home / "up.err", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "firn", "up", "--json", *extra],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    report = json.loads(line) if line else {}
    if report.get("status") != "up":
        # Reap it here so a failed start cannot leak into the next test's warnings.
        _reap(proc)
        pytest.fail(f"firn up failed: {report or line!r}\n{(home / 'up.err').read_text()}")
    return proc, report


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()


def _log_tails(home: Path, lines: int = 30) -> str:
    """The end of ``firn up``'s stderr and of the servers' logs, to tell which part of
    a stop hung."""
    logs = [
        home / "up.err",
        *sorted(home.glob("kafka/*.log")),
        *sorted(home.glob("postgres/*.log")),
    ]
    return "\n".join(
        f"--- {path.relative_to(home)}\n" + "\n".join(path.read_text().splitlines()[-lines:])
        for path in logs
        if path.is_file()
    )


def _processes_under(home: Path) -> list[str]:
    """Every running process whose command line mentions ``home`` (the stack's own)."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True
    ).stdout
    return [
        line
        for line in out.splitlines()
        if str(home) in line and " Z" not in line and "ps -ww" not in line
    ]


def _all_pids(state: dict) -> list[int]:
    return [state["supervisor_pid"], *state["pids"].values()]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1].startswith("Z")


def test_up_connects_every_service_and_down_leaves_no_orphans(home: Path) -> None:
    env = _env(home)
    proc, report = _start_up(home, env)
    try:
        assert set(report["services"]) == set(SERVICES)
        state = json.loads((home / "stack.json").read_text())
        assert all(not _gone(pid) for pid in _all_pids(state))
        assert _processes_under(home), "postgres and kafka run from the stack home"
        # Each service registered itself in the catalog after reaching its dependencies.
        with psycopg.connect(report["database_url"]) as conn:
            live = dict(
                conn.execute(
                    "SELECT service, count(*) FROM firn.service_instance "
                    "WHERE stopped_at IS NULL GROUP BY service"
                ).fetchall()
            )
        assert live == dict.fromkeys(SERVICES, 1)
        # The dashboard runs in firn up itself, on the catalog of the stack.
        with urllib.request.urlopen(report["dashboard"], timeout=30) as page:
            assert page.status == 200
            assert "<h1>Tables</h1>" in page.read().decode()

        down = _firn("down", "--json", env=env)
        assert down.returncode == 0, down.stderr
        assert json.loads(down.stdout) == {"status": "down", "killed_leftovers": []}
        assert proc.wait(60) == 0
    finally:
        _reap(proc)
    assert all(_gone(pid) for pid in _all_pids(state))
    assert _processes_under(home) == []
    assert not (home / "stack.json").exists()


def test_ctrl_c_stops_everything(home: Path) -> None:
    env = _env(home)
    proc, _ = _start_up(home, env, "--no-services")
    state = json.loads((home / "stack.json").read_text())
    try:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"firn up still running 60 s after Ctrl-C\n{_log_tails(home)}")
        assert code == 0
    finally:
        _reap(proc)
    assert all(_gone(pid) for pid in _all_pids(state))
    assert _processes_under(home) == []


def test_a_killed_supervisor_takes_its_children_with_it(home: Path) -> None:
    env = _env(home)
    proc, _ = _start_up(home, env, "--no-services")
    state = json.loads((home / "stack.json").read_text())
    proc.kill()
    _reap(proc)
    eventually(
        lambda: all(_gone(p) for p in state["pids"].values()),
        timeout=60,
        what="every process of the killed stack gone",
        every=0.5,
    )
    assert _processes_under(home) == []
    # A later `firn down` finds the stale state, reports it and cleans it up.
    down = _firn("down", "--json", env=env)
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["status"] == "down"
    assert not (home / "stack.json").exists()


def _sourced(path: Path) -> dict[str, str]:
    """The variables of an env file as ``set -a; . FILE`` gives them to a shell."""
    variables = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition("=")
        variables[name] = shlex.split(value)[0]
    return variables


def test_up_with_secure_kafka_runs_each_process_as_its_own_principal(home: Path) -> None:
    """``firn up --secure-kafka``: the services connect as their own principals, a
    producer with the login file ``firn up`` wrote commits, the operator's file asks
    for a compaction that the services carry out, and a client without a login is
    turned away."""
    env = _env(home)
    proc, report = _start_up(home, env, "--secure-kafka")
    try:
        logins = report["kafka_logins"]
        assert set(logins) == set(ROLES)
        for path in logins.values():
            assert Path(path).stat().st_mode & 0o777 == 0o600
        assert set(report["services"]) == set(SERVICES)  # they connected with their logins
        producer = _sourced(Path(logins["producer"]))
        assert json.loads(producer["FIRN_KAFKA_CONFIG"])["sasl.username"] == "firn-producer"

        as_producer = {
            **env,
            **producer,
            "FIRN_DATABASE_URL": report["database_url"],
            "FIRN_WAREHOUSE": str(home / "warehouse"),
        }
        made = _firn(
            "table", "create", "shop.orders", "--schema", "id:int64,v:string",
            "--primary-key", "id", env=as_producer,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        wrote = subprocess.run(
            [sys.executable, "-c", COMMIT_TWICE],
            env=as_producer,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert wrote.returncode == 0, wrote.stderr
        assert "Kafka refused" not in wrote.stderr

        as_operator = {**as_producer, **_sourced(Path(logins["operator"]))}
        compacted = _firn("compact", "shop.orders", "--wait", "--json", env=as_operator)
        assert compacted.returncode == 0, compacted.stdout + compacted.stderr
        read = subprocess.run(
            [sys.executable, "-c", READ], env=as_producer, cwd=REPO, capture_output=True, text=True
        )
        assert read.stdout.split() == ["1", "3"], read.stderr

        anonymous = AdminClient({"bootstrap.servers": report["kafka_bootstrap"]})
        with pytest.raises(KafkaException):
            anonymous.list_topics(timeout=5)
    finally:
        down = _firn("down", "--json", env=env)
        _reap(proc)
    assert down.returncode == 0, down.stderr


COMMIT_TWICE = """
import pyarrow as pa
import firn
with firn.connect() as catalog:
    table = catalog.table("shop.orders")
    table.upsert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    table.delete(pa.table({"id": [2]}))
"""

READ = """
import firn
with firn.connect() as catalog:
    table = catalog.table("shop.orders")
    print(*sorted(table.read().column("id").to_pylist()))
"""
