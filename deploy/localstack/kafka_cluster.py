"""A multi-node Apache Kafka cluster in KRaft mode on loopback, for tests of failover.

Every node is a combined broker+controller. The storages are formatted with one
cluster id and the same ``--initial-controllers`` list (``id@host:port:directory``
of every node), so the controller quorum starts with all nodes as voters (Kafka 4.x
dynamic quorum, no ``controller.quorum.voters``). A node keeps its ports, storage and
directory id across restarts, so ``kill`` (SIGKILL) or ``stop`` one node and
``start_node`` it again: it rejoins as the same broker and voter.

The internal topics and the broker-side defaults are replicated to every node with
``min.insync.replicas`` one lower: one node may be down and ``acks=all`` writes
still succeed. Broker sessions are short so a killed node is fenced (and its
partitions get new leaders) within seconds rather than the default nine.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from firn.errors import StackError

from .kafka import (
    KAFKA_VERSION,
    broker_jars,
    cluster_id,
    format_storage,
    node_settings,
    spawn_server,
)
from .processes import free_port, port_is_open, stop, tail, wait_until

log = logging.getLogger(__name__)

_START_TIMEOUT = 120.0


@dataclass
class KafkaNode:
    """One broker+controller of a cluster; its ports and storage outlive restarts."""

    node_id: int
    data: Path
    port: int
    controller_port: int
    directory_id: str
    _proc: Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def voter(self) -> str:
        """This node in ``--initial-controllers`` form: id@host:port:directory-id."""
        return f"{self.node_id}@127.0.0.1:{self.controller_port}:{self.directory_id}"

    @property
    def log_path(self) -> Path:
        return self.data / "broker.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


@dataclass
class KafkaCluster:
    """``size`` combined nodes on loopback; start, stop, kill and restart each one."""

    cache: Path
    data: Path
    size: int = 3
    heap: str = "384m"
    nodes: list[KafkaNode] = field(default_factory=list, init=False)
    cluster_id: str = field(default_factory=cluster_id, init=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def start(self) -> None:
        """Format (first time) and start every node; return when all brokers are
        registered with the controller."""
        libs = broker_jars(self.cache)
        if not self.nodes:
            self.nodes = [
                KafkaNode(
                    node_id=n,
                    data=self.data / f"node-{n}",
                    port=free_port(),
                    controller_port=free_port(),
                    directory_id=cluster_id(),
                )
                for n in range(1, self.size + 1)
            ]
        voters = ",".join(node.voter for node in self.nodes)
        for node in self.nodes:
            config = self._write_config(node)
            if not (node.data / "logs" / "meta.properties").exists():
                format_storage(libs, config, self.cluster_id, "--initial-controllers", voters)
        try:
            # All at once: a node's broker waits for a controller quorum, which
            # needs a majority of the nodes up.
            for node in self.nodes:
                self._spawn(node)
            for node in self.nodes:
                self._wait_for_port(node)
            self.wait_for_brokers(self.size)
        except BaseException:
            self.stop()
            raise
        log.info("Kafka %s cluster of %d is up at %s", KAFKA_VERSION, self.size, self.bootstrap)

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise StackError(f"no node {node_id} in this cluster")

    def start_node(self, node_id: int) -> None:
        """Restart one node, until the cluster sees it as a broker again."""
        node = self.node(node_id)
        if node.running:
            return
        self._spawn(node)
        self._wait_for_port(node)
        self.wait_for_brokers(sum(1 for n in self.nodes if n.running))

    def _spawn(self, node: KafkaNode) -> None:
        libs = broker_jars(self.cache)
        config = node.data / "server.properties"
        node._proc = spawn_server(libs, node.data, config, self.heap, node.log_path)

    def _wait_for_port(self, node: KafkaNode) -> None:
        assert node._proc is not None
        wait_until(
            lambda: port_is_open(node.port),
            what=f"Kafka node {node.node_id}",
            proc=node._proc,
            log_path=node.log_path,
            timeout=_START_TIMEOUT,
        )

    def kill_node(self, node_id: int) -> None:
        """SIGKILL: no controlled shutdown, no leadership handed over first."""
        node = self.node(node_id)
        if node._proc is not None:
            node._proc.send_signal(signal.SIGKILL)
            node._proc.wait(30)
            node._proc = None

    def stop_node(self, node_id: int) -> None:
        node = self.node(node_id)
        if node._proc is not None:
            stop(node._proc, f"Kafka node {node_id}", timeout=30.0)
            node._proc = None

    def stop(self) -> None:
        """Stop every node. All are signalled first: a node alone cannot finish a
        controlled shutdown once the others are gone (no controller quorum)."""
        running = [node for node in self.nodes if node._proc is not None]
        for node in running:
            assert node._proc is not None
            if node._proc.poll() is None:
                node._proc.send_signal(signal.SIGTERM)
        for node in running:
            assert node._proc is not None
            stop(node._proc, f"Kafka node {node.node_id}", timeout=20.0)
            node._proc = None

    def wait_for_brokers(self, count: int, timeout: float = _START_TIMEOUT) -> None:
        """Until the cluster metadata lists ``count`` live brokers."""
        live = [node for node in self.nodes if node.running]
        admin = AdminClient({"bootstrap.servers": ",".join(n.address for n in live)})
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for node in live:
                if not node.running:
                    raise StackError(
                        f"Kafka node {node.node_id} exited while the cluster started;\n"
                        f"last lines of {node.log_path}:\n{tail(node.log_path)}"
                    )
            try:
                seen = len(admin.list_topics(timeout=5).brokers)
            except KafkaException:  # while the quorum elects its first leader
                seen = 0
            if seen >= count:
                return
            time.sleep(0.5)
        raise StackError(f"the Kafka cluster had {seen} of {count} brokers after {timeout:.0f}s")

    def _write_config(self, node: KafkaNode) -> Path:
        node.data.mkdir(parents=True, exist_ok=True)
        replicas = self.size
        insync = max(1, self.size - 1)
        settings = node_settings(
            node_id=node.node_id,
            port=node.port,
            controller_port=node.controller_port,
            voters=[n.controller_port for n in self.nodes],
            log_dirs=node.data / "logs",
            replicas=replicas,
            insync=insync,
        )
        settings.update(
            {
                "default.replication.factor": str(replicas),
                "min.insync.replicas": str(insync),
                # A killed node is fenced, and loses its leaderships, after this long.
                "broker.session.timeout.ms": "4000",
                "broker.heartbeat.interval.ms": "1000",
            }
        )
        config = node.data / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return config
