"""The topics Firn's services talk through, and their idempotent creation.

Partitions, replication factor and ``min.insync.replicas`` come from the settings
(``FIRN_TOPIC_PARTITIONS``, ``FIRN_TOPIC_REPLICATION``,
``FIRN_TOPIC_MIN_INSYNC_REPLICAS``). A topic that exists is left as it is: Firn never
repartitions or re-replicates a topic behind an operator's back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import TopicMetadata
from confluent_kafka.cimpl import NewTopic

from firn.errors import ConfigError, ServiceError
from firn.kafka.clients import admin_client
from firn.settings import FirnSettings

log = logging.getLogger(__name__)

VISIBLE_POLL_SECONDS = 0.05
"""How often a created topic's metadata is asked for until every partition has a leader."""


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


def new_topics(
    settings: FirnSettings,
    names: tuple[str, ...],
    *,
    partitions: int | None = None,
    config: Mapping[str, str] | None = None,
) -> list[NewTopic]:
    """How each topic is created: partitions (``partitions`` overrides the setting,
    for tests that need one ordered partition), replication, min.insync.replicas
    when there is more than one replica, and any other ``config``."""
    config = dict(config or {})
    if settings.topic_replication > 1:
        config["min.insync.replicas"] = str(settings.min_insync_replicas())
    return [
        NewTopic(
            name,
            num_partitions=partitions or settings.topic_partitions,
            replication_factor=settings.topic_replication,
            config=dict(config),
        )
        for name in names
    ]


def ensure_topics(
    settings: FirnSettings,
    names: tuple[str, ...],
    *,
    partitions: int | None = None,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create the topics that do not exist yet; existing ones are left as they are.

    Only missing topics are asked for, so on a cluster whose topics an administrator
    created, a service needs DESCRIBE on them but no CREATE right (see the ACL
    layout in docs/reference/kafka-acls.md). A broker that refuses this client's
    login or certificate check is a ``ConfigError`` (trying again cannot help), said
    as soon as it is seen."""
    refusals: list[KafkaError] = []
    admin = admin_client(  # kept referenced: its futures die with it
        settings, error_cb=lambda error: refusals.append(error)
    )
    existing = _topic_names(admin, settings, refusals, timeout)
    missing = tuple(name for name in names if name not in existing)
    if not missing:
        return
    create_topics(
        admin, new_topics(settings, missing, partitions=partitions, config=config), timeout
    )
    wait_until_visible(admin, missing, timeout=timeout)


def _refusal(error: KafkaError) -> bool:
    """Whether a client error says who the client is or whom it trusts, not how the
    network is: a refused login, or a broker certificate the client does not trust
    (a handshake cut short by a restarting broker is weather, and retried)."""
    if error.code() == KafkaError._AUTHENTICATION:
        return True
    return error.code() == KafkaError._SSL and "certificate verify failed" in error.str()


LIST_ATTEMPT_SECONDS = 3.0


def _topic_names(
    admin: AdminClient, settings: FirnSettings, refusals: list[KafkaError], timeout: float
) -> set[str]:
    """The topics the broker shows this client; asked in short attempts, so that a
    refused login (reported through ``error_cb``) ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        attempt = max(0.1, min(LIST_ATTEMPT_SECONDS, deadline - time.monotonic()))
        try:
            return set(admin.list_topics(timeout=attempt).topics)
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            refused = [e for e in refusals if _refusal(e)]
            if refused:
                user = settings.kafka_config.get("sasl.username")
                who = f" as {user!r}" if user else ""
                raise ConfigError(
                    f"Kafka refused this client{who}: {refused[-1].str()} (check "
                    "FIRN_KAFKA_CONFIG, FIRN_KAFKA_SASL_PASSWORD and the CA)"
                ) from exc
            if time.monotonic() >= deadline:
                raise ServiceError(f"cannot list the Kafka topics: {exc}") from exc


CREATE_RETRY_SECONDS = 0.5


def create_topics(admin: AdminClient, topics: list[NewTopic], timeout: float) -> None:
    """Create ``topics``; one another process created meanwhile is fine. A broker
    that just restarted stays fenced until its first heartbeat and refuses every
    topic meanwhile (``INVALID_REPLICATION_FACTOR``: "all brokers are currently
    fenced"), like any retriable error: those are asked again until ``timeout``
    (a cluster with too few brokers for the replication is reported then)."""
    deadline = time.monotonic() + timeout
    pending = topics
    while pending:
        futures = admin.create_topics(pending, operation_timeout=timeout, request_timeout=timeout)
        again: list[str] = []
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
                log.info("created topic %s", name)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # another process created it meanwhile
                if _transient(error) and time.monotonic() < deadline:
                    again.append(name)
                    continue
                raise ServiceError(f"cannot create topic {name}: {exc}") from exc
            except TimeoutError as exc:  # the broker is away: worth trying again
                raise ServiceError(f"no answer from Kafka creating topic {name}") from exc
        if again:
            log.warning("Kafka cannot create %s yet; trying again", ", ".join(again))
            time.sleep(CREATE_RETRY_SECONDS)
        pending = [t for t in pending if t.topic in again]


def _transient(error: KafkaError) -> bool:
    return bool(error.retriable()) or error.code() == KafkaError.INVALID_REPLICATION_FACTOR


def wait_until_visible(admin: AdminClient, names: tuple[str, ...], *, timeout: float) -> None:
    """Wait until the broker's metadata shows every topic with a leader for each
    partition.

    A created topic is committed by the controller before every broker's metadata
    cache holds it. A client whose first metadata request lands in between sees the
    topic missing and may not ask again for minutes (aiokafka waits for
    ``metadata_max_age_ms``): the metrics worker's Faust table once read "changelog
    has 0 partitions" for four minutes and parked every update."""
    deadline = time.monotonic() + timeout
    waiting = list(names)
    while waiting:
        try:
            topics = admin.list_topics(topic=waiting[0], timeout=timeout).topics
        except KafkaException as exc:
            raise ServiceError(f"cannot describe topic {waiting[0]}: {exc}") from exc
        if _has_leaders(topics.get(waiting[0])):
            waiting.pop(0)
            continue
        if time.monotonic() > deadline:
            raise ServiceError(
                f"topic {waiting[0]} was created but its partitions have no leader after "
                f"{timeout:.0f}s"
            )
        time.sleep(VISIBLE_POLL_SECONDS)


def _has_leaders(topic: TopicMetadata | None) -> bool:
    return (
        topic is not None
        and topic.error is None
        and bool(topic.partitions)
        and all(partition.leader >= 0 for partition in topic.partitions.values())
    )
