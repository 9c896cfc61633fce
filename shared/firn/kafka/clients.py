"""confluent-kafka clients built from settings (never at import time).

Producers are idempotent with ``acks=all`` so a retried send is not duplicated by the
broker; consumers never auto-commit: a service commits an offset only after the side
effect of the message is durable.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from firn.settings import FirnSettings


def admin_client(settings: FirnSettings) -> AdminClient:
    return AdminClient({"bootstrap.servers": settings.kafka_servers()})


def producer(settings: FirnSettings, **overrides: Any) -> Producer:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_servers(),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        **overrides,
    }
    return Producer(config)


def consumer(settings: FirnSettings, group_id: str, **overrides: Any) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_servers(),
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        **overrides,
    }
    return Consumer(config)
