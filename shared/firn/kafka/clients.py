"""confluent-kafka clients built from settings (never at import time).

Every client starts from ``FirnSettings.kafka_client_config()``: the bootstrap
servers, the ``FIRN_KAFKA_CONFIG`` pass-through (TLS, SASL, tuning) and the secrets,
so a secured cluster needs no change in any service.

Producers are idempotent with ``acks=all`` so a retried send is neither duplicated
nor acknowledged before every in-sync replica has it (with ``min.insync.replicas``
below the replication factor, one broker may fail without losing an acknowledged
event). Consumers never store an offset by themselves (``enable.auto.offset.store``
off): a service stores a message's offset only after its side effect is durable, and
the consumer commits what was stored, in the background, on a revocation and on
close. Neither guarantee can be overridden.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from firn.errors import ConfigError
from firn.settings import FirnSettings

PRODUCER_GUARANTEES: Mapping[str, Any] = {"enable.idempotence": True, "acks": "all"}
CONSUMER_GUARANTEES: Mapping[str, Any] = {"enable.auto.offset.store": False}
SESSION_TIMEOUT_MS = 10_000


def _with(guarantees: Mapping[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    for key, value in guarantees.items():
        if key in config and config[key] != value:
            raise ConfigError(f"a Firn Kafka client cannot set {key}={config[key]!r}")
    return {**config, **guarantees}


def admin_config(settings: FirnSettings) -> dict[str, Any]:
    return settings.kafka_client_config()


def producer_config(settings: FirnSettings, **overrides: Any) -> dict[str, Any]:
    return _with(
        PRODUCER_GUARANTEES, {**settings.kafka_client_config(), "linger.ms": 5, **overrides}
    )


def consumer_config(settings: FirnSettings, group_id: str, **overrides: Any) -> dict[str, Any]:
    return _with(
        CONSUMER_GUARANTEES,
        {
            # A member killed without leaving holds its partitions until its session
            # times out: librdkafka's 45 s default would stall that share of the work
            # for 45 s after every crash, even when the restarted process is back in a
            # second. Heartbeats come from librdkafka's own thread (a long handler does
            # not delay them), so 10 s, Kafka's default before 3.0, is safe; a session
            # lost in a broker restart costs a rebalance and redelivered events, which
            # handlers take twice (firn.kafka.loop resumes what it paused even then).
            # FIRN_KAFKA_CONFIG may set another.
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            **settings.kafka_client_config(),
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "auto.commit.interval.ms": 1000,  # a restart redelivers at most ~1 s of work
            **overrides,
        },
    )


def admin_client(settings: FirnSettings, **overrides: Any) -> AdminClient:
    return AdminClient({**admin_config(settings), **overrides})


def producer(settings: FirnSettings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


def consumer(settings: FirnSettings, group_id: str, **overrides: Any) -> Consumer:
    return Consumer(consumer_config(settings, group_id, **overrides))
