"""The local stack runner: real Postgres and a real Apache Kafka broker on loopback."""

from .kafka import KAFKA_VERSION, KafkaBroker
from .kafka_cluster import KafkaCluster
from .postgres import PostgresServer
from .stack import LocalStack, read_state

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaCluster",
    "LocalStack",
    "PostgresServer",
    "read_state",
]
