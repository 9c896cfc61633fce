"""The local stack runner: real Postgres and a real Apache Kafka broker on loopback, and
a Spark standalone cluster for tests."""

from .kafka import KAFKA_VERSION, KafkaBroker
from .kafka_cluster import KafkaCluster
from .postgres import PostgresServer
from .spark_cluster import SparkCluster, worker_venv
from .stack import LocalStack, read_state

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaCluster",
    "LocalStack",
    "PostgresServer",
    "SparkCluster",
    "read_state",
    "worker_venv",
]
