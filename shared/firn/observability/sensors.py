"""The Prometheus ``Sensors``: what the edge clients report, as the instruments of
``instruments``. A service installs them at start-up (``firn.sensors.install``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from firn.observability.instruments import (
    CONSUMER_LAG,
    CONSUMER_RENEWALS,
    DEAD_LETTERS,
    LOST_DEAD_LETTERS,
    POSTGRES_ERRORS,
    POSTGRES_RECONNECTS,
)
from firn.sensors import TopicPartition


class PrometheusSensors:
    def postgres_error(self, error: str) -> None:
        POSTGRES_ERRORS.labels(error).inc()

    def postgres_reconnected(self) -> None:
        POSTGRES_RECONNECTS.inc()

    def consumer_renewed(self, service: str) -> None:
        CONSUMER_RENEWALS.labels(service).inc()

    def consumer_lag(
        self, service: str, lag: Mapping[TopicPartition, int], gone: Iterable[TopicPartition]
    ) -> None:
        for topic, partition in gone:
            CONSUMER_LAG.remove(service, topic, str(partition))
        for (topic, partition), n in lag.items():
            CONSUMER_LAG.labels(service, topic, str(partition)).set(n)

    def dead_letter(self, service: str, kind: str) -> None:
        DEAD_LETTERS.labels(service, kind).inc()

    def dead_letter_lost(self, service: str) -> None:
        LOST_DEAD_LETTERS.labels(service).inc()
