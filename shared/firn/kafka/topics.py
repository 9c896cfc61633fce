"""The topics Firn's services talk through, and their idempotent creation."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from firn.errors import ServiceError
from firn.settings import FirnSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Topics:
    """Every topic name, derived from one prefix so a test can own a private set."""

    prefix: str = "firn."

    @property
    def commits(self) -> str:
        """Producer commit events; consumed by metrics."""
        return f"{self.prefix}commits"

    @property
    def plan_requests(self) -> str:
        """Metrics asking the planner to plan a partition."""
        return f"{self.prefix}plan-requests"

    @property
    def plan_tasks(self) -> str:
        """One event per planned task; consumed by the executor-dispatcher."""
        return f"{self.prefix}plan-tasks"

    @property
    def task_results(self) -> str:
        """Prepared or failed task attempts; consumed by the committer."""
        return f"{self.prefix}task-results"

    @property
    def compactions(self) -> str:
        """Committed plans; consumed by metrics to reset its counters."""
        return f"{self.prefix}compactions"

    @property
    def metrics_updates(self) -> str:
        """Internal to metrics: per-partition updates keyed table_id/partition."""
        return f"{self.prefix}metrics-updates"

    @property
    def dlq(self) -> str:
        """Events that could not be decoded or handled, with the reason."""
        return f"{self.prefix}dlq"

    def all(self) -> tuple[str, ...]:
        return (
            self.commits,
            self.plan_requests,
            self.plan_tasks,
            self.task_results,
            self.compactions,
            self.metrics_updates,
            self.dlq,
        )

    @classmethod
    def from_settings(cls, settings: FirnSettings) -> Topics:
        return cls(settings.topic_prefix)


def ensure_topics(
    admin: AdminClient, names: tuple[str, ...], *, partitions: int = 4, timeout: float = 30.0
) -> None:
    """Create the topics that do not exist yet; existing ones are left as they are."""
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
            log.info("created topic %s", name)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise ServiceError(f"cannot create topic {name}: {exc}") from exc
        except TimeoutError as exc:  # the broker is away: worth trying again
            raise ServiceError(f"no answer from Kafka creating topic {name}") from exc
