"""The Kafka edge of the core library: topic names, client factories, the consume loop."""

from firn.kafka.clients import admin_client, consumer, producer
from firn.kafka.topics import Topics, ensure_topics

__all__ = ["Topics", "admin_client", "consumer", "ensure_topics", "producer"]
