"""A single-node Apache Kafka broker in KRaft mode, run from the official jars.

The jars (``org.apache.kafka:kafka_2.13`` and its runtime closure) come from Maven
Central once and are cached under ``<home>/cache``; the broker's storage is formatted
on first start and kept under ``<data>``. Java 17 is the only prerequisite.
"""

from __future__ import annotations

import base64
import logging
import shutil
import uuid
import zipfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from subprocess import Popen

from firn.errors import StackError

from . import maven
from .kafka_security import BrokerSecurity
from .private_files import write_private
from .processes import free_port, port_is_open, run, spawn, stop, wait_until

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.3.1"
"""The pinned broker version; docker-compose.yml uses the same apache/kafka tag."""

_START_TIMEOUT = 90.0


def broker_jars(cache: Path) -> Path:
    """The folder of broker jars, fetched from Maven Central on first use.

    The cache is marked complete only after the broker's main classes were found in
    its jars and one of them ran on this Java; a cache that is marked complete but
    fails that check (an interrupted copy, jars in the wrong folder) is fetched anew
    rather than trusted."""
    # Absolute: Maven resolves a relative output directory against the pom's folder,
    # which once put the jars in libs/.firn/cache/... while libs/ stayed empty.
    libs = (cache / f"kafka-{KAFKA_VERSION}" / "libs").resolve()
    done = libs.parent / ".complete"
    if done.exists():
        problem = broken_jars(libs)
        if problem is None:
            return libs
        log.warning("cached Kafka jars in %s are broken (%s); fetching again", libs, problem)
        done.unlink()
    if shutil.which("java") is None:
        raise StackError(
            "Java 17 or newer is required to run the local Kafka broker: "
            "install it (Debian: apt-get install openjdk-17-jre-headless)"
        )
    log.info("fetching Apache Kafka %s jars from Maven Central (first run only)", KAFKA_VERSION)
    if libs.exists():
        shutil.rmtree(libs)
    libs.mkdir(parents=True)
    pom = libs.parent / "pom.xml"
    template = resources.files(__package__).joinpath("kafka-broker.pom.xml").read_text()
    pom.write_text(template.replace("KAFKA_VERSION", KAFKA_VERSION))
    maven.copy_dependencies(pom, libs, cache.resolve())
    problem = broken_jars(libs)
    if problem is not None:
        raise StackError(f"the Kafka jars fetched into {libs} are unusable: {problem}")
    run(
        ["java", "-cp", f"{libs}/*", "kafka.tools.StorageTool", "random-uuid"],
        what="checking that the fetched Kafka broker runs on this Java",
    )
    done.touch()
    return libs


BROKER_CLASSES = ("kafka/Kafka.class", "kafka/tools/StorageTool.class")
"""The main classes the runner starts: the broker and the storage formatter."""


def broken_jars(libs: Path) -> str | None:
    """Why the jars in ``libs`` cannot run the broker, or None when they can."""
    core = libs / f"kafka_2.13-{KAFKA_VERSION}.jar"
    if not core.is_file():
        return f"{core.name} is missing"
    try:
        with zipfile.ZipFile(core) as jar:
            names = set(jar.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        return f"{core.name} is not a readable jar: {exc}"
    missing = [c for c in BROKER_CLASSES if c not in names]
    if missing:
        return f"{core.name} lacks {', '.join(missing)}"
    return None


def cluster_id() -> str:
    """A random cluster id as Kafka makes them (``Uuid.randomUuid``): URL-safe base64
    of 16 bytes, never starting with '-', which the storage tool would take for an
    option (one id in 64 did, and `firn up` failed at random)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def format_storage(libs: Path, config: Path, cluster: str, *quorum: str) -> None:
    """Format a node's storage for ``cluster``; ``quorum`` says how the voter set is
    bootstrapped (``--standalone`` or ``--initial-controllers ...``)."""
    run(
        [
            *("java", "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format"),
            *("-t", cluster, *quorum, "-c", str(config)),
        ],
        what="formatting the Kafka storage",
    )


def spawn_server(libs: Path, data: Path, config: Path, heap: str, log_path: Path) -> Popen[bytes]:
    """Start ``kafka.Kafka`` on ``config`` with the local stack's quiet logging."""
    log4j = data / "log4j2.properties"
    log4j.write_text(resources.files(__package__).joinpath("kafka-log4j2.properties").read_text())
    return spawn(
        [
            "java",
            f"-Xmx{heap}",
            f"-Xms{heap}",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(config),
        ],
        log_path=log_path,
    )


@dataclass
class KafkaBroker:
    """One broker+controller process on loopback; with ``security``, its listeners
    take SASL over TLS only and an authorizer guards every topic and group."""

    cache: Path
    data: Path
    port: int = 0
    controller_port: int = 0
    heap: str = "512m"
    security: BrokerSecurity | None = None
    _proc: Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path:
        return self.data / "broker.log"

    def start(self) -> None:
        libs = broker_jars(self.cache)
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        if port_is_open(self.port):
            raise StackError(f"port {self.port} is taken; set FIRN_KAFKA_PORT to another one")
        config = self._write_config()
        if not (self.data / "logs" / "meta.properties").exists():
            format_storage(libs, config, cluster_id(), "--standalone")
        self._proc = spawn_server(libs, self.data, config, self.heap, self.log_path)
        wait_until(
            lambda: port_is_open(self.port),
            what=f"Kafka {KAFKA_VERSION}",
            proc=self._proc,
            log_path=self.log_path,
            timeout=_START_TIMEOUT,
        )
        log.info("Kafka %s is up at %s (pid %d)", KAFKA_VERSION, self.bootstrap, self._proc.pid)

    def stop(self) -> None:
        if self._proc is not None:
            stop(self._proc, "Kafka", timeout=30.0)
            self._proc = None

    def _write_config(self) -> Path:
        self.data.mkdir(parents=True, exist_ok=True)
        logs = self.data / "logs"
        # The controller port must stay the same across restarts of a formatted
        # storage: the standalone voter set records it.
        settings = node_settings(
            node_id=1,
            port=self.port,
            controller_port=self.controller_port,
            voters=[self.controller_port],
            log_dirs=logs,
        )
        if self.security is not None:
            settings.update(self.security.broker_settings(self.port, self.controller_port))
        config = self.data / "server.properties"
        # With security it holds the admin's password: readable by its owner only.
        write_private(config, "".join(f"{k}={v}\n" for k, v in settings.items()))
        return config


def node_settings(
    *,
    node_id: int,
    port: int,
    controller_port: int,
    voters: list[int],
    log_dirs: Path,
    replicas: int = 1,
    insync: int = 1,
) -> dict[str, str]:
    """``server.properties`` of one combined broker+controller on loopback, whose
    internal topics are replicated ``replicas`` times (the single broker and each
    node of a ``KafkaCluster``)."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.bootstrap.servers": ",".join(f"127.0.0.1:{v}" for v in voters),
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dirs),
        "num.partitions": "1",
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(insync),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(insync),
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
    }
