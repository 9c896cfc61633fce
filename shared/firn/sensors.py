"""What the edge clients (the Postgres connection, the Kafka consume loop) report as
they work, behind one small protocol.

The clients sit below ``firn.observability`` and must not import it: they call
``sensors()`` and report to whatever is installed. A process that serves metrics
installs the Prometheus implementation (``firn.observability.sensors``) at start-up;
anything else (a producer, a test, a one-off command) reports to ``Silent``, which
drops every reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

TopicPartition = tuple[str, int]


class Sensors(Protocol):
    def postgres_error(self, error: str) -> None:
        """A Postgres error of class ``error`` was caught (retried or not)."""

    def postgres_reconnected(self) -> None:
        """A broken catalog connection was opened again."""

    def consumer_renewed(self, service: str) -> None:
        """``service`` replaced a consumer whose group had lost its coordinator."""

    def consumer_lag(
        self, service: str, lag: Mapping[TopicPartition, int], gone: Iterable[TopicPartition]
    ) -> None:
        """The messages not yet read per assigned partition; ``gone`` are partitions
        reported before that another member holds now."""

    def dead_letter(self, service: str, kind: str) -> None:
        """A message was parked in the dead-letter topic, for a reason of ``kind``."""

    def dead_letter_lost(self, service: str) -> None:
        """A message was skipped because even its dead letter was refused."""


class Silent:
    """Sensors that record nothing: the default outside a service."""

    def postgres_error(self, error: str) -> None:
        pass

    def postgres_reconnected(self) -> None:
        pass

    def consumer_renewed(self, service: str) -> None:
        pass

    def consumer_lag(
        self, service: str, lag: Mapping[TopicPartition, int], gone: Iterable[TopicPartition]
    ) -> None:
        pass

    def dead_letter(self, service: str, kind: str) -> None:
        pass

    def dead_letter_lost(self, service: str) -> None:
        pass


_installed: Sensors = Silent()


def sensors() -> Sensors:
    """The sensors this process reports to."""
    return _installed


def install(chosen: Sensors) -> Sensors:
    """Report to ``chosen`` from now on; returns the sensors it replaces."""
    global _installed
    previous, _installed = _installed, chosen
    return previous
