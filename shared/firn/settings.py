"""Typed settings, read once from the environment (prefix ``FIRN_``) and passed down.

Nothing else in Firn reads ``os.environ`` for its configuration: ``main`` builds one
``FirnSettings`` and hands it to whatever needs it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from firn.errors import ConfigError
from firn.units import Bytes, Seconds

# Matched whole (fullmatch): with ``$`` a trailing newline would pass.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._\-]{0,200}")
"""Kafka's topic characters; 200 leaves room for the longest name made from it
(``<prefix>metrics-partitions-changelog``) within Kafka's 249."""

KAFKA_SECRETS = {
    "sasl.password": "FIRN_KAFKA_SASL_PASSWORD",
    "ssl.key.password": "FIRN_KAFKA_SSL_KEY_PASSWORD",
}
"""librdkafka properties that are secrets: each has a SecretStr setting of its own, so
that it never shows in a repr or a log line of the settings."""

KAFKA_OWNED = {
    "bootstrap.servers": "set FIRN_KAFKA_BOOTSTRAP instead",
    "enable.idempotence": "every Firn producer is idempotent",
    "acks": "every Firn producer waits for all in-sync replicas",
    "enable.auto.commit": "Firn's consumers commit the offsets they stored, in the background",
    "enable.auto.offset.store": "Firn stores an offset only after its side effect is durable",
    "group.id": "each service names its own consumer group",
}
"""librdkafka properties Firn sets itself; a pass-through value would break a guarantee."""


class FirnSettings(BaseSettings):
    """Everything a Firn process needs to find its dependencies."""

    model_config = SettingsConfigDict(env_prefix="FIRN_", extra="ignore", frozen=True)

    database_url: SecretStr | None = Field(
        default=None,
        description="Postgres URL of the catalog; unset means the local stack's server.",
    )
    database_schema: str = Field(
        default="firn",
        description="Postgres schema holding Firn's tables (tests use one per test).",
    )
    kafka_bootstrap: str | None = Field(
        default=None,
        description="Kafka bootstrap servers; unset means the local stack's broker.",
    )
    kafka_config: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra librdkafka properties as a JSON object, applied to every producer, "
        'consumer and admin client, e.g. {"security.protocol": "SASL_SSL", '
        '"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "firn-planner", '
        '"ssl.ca.location": "/etc/kafka/ca.pem"}. Passwords have settings of their own.',
    )
    kafka_sasl_password: SecretStr | None = Field(
        default=None,
        description="SASL password (librdkafka sasl.password) of every Kafka client.",
    )
    kafka_ssl_key_password: SecretStr | None = Field(
        default=None,
        description="Password of the client's TLS private key (librdkafka ssl.key.password).",
    )
    topic_prefix: str = Field(
        default="firn.",
        description="Prefix of every Firn topic, e.g. firn.commits (tests use one per test).",
    )
    topic_partitions: int = Field(
        default=4,
        ge=1,
        description="Partitions of each topic Firn creates (existing topics are left as "
        "they are); the most members one service's consumer group can keep busy.",
    )
    topic_replication: int = Field(
        default=1,
        ge=1,
        description="Replication factor of each topic Firn creates, and of the metrics "
        "service's Faust topics; at most the number of brokers.",
    )
    topic_min_insync_replicas: int | None = Field(
        default=None,
        ge=1,
        description="min.insync.replicas of each topic Firn creates; unset means "
        "replication - 1 (at least 1), so one broker may be down while acks=all "
        "producers carry on.",
    )
    warehouse: str = Field(
        default=".firn/warehouse",
        description="Root of table data: a local directory or an s3:// URI.",
    )
    spark_master: str = Field(
        default="local[*]",
        description="Spark master URL for the executor; local mode by default.",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description='Extra Spark settings as a JSON object, e.g. {"spark.executor.memory": "2g"}.',
    )
    table_defaults: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Table properties a table created through these settings takes where "
        "its own properties say nothing, as a JSON object, e.g. "
        '{"major.interval-max": "10min"} to bound how long a quiet table\'s published view '
        "trails it; checked as a table's properties are when a catalog is opened. Tables "
        "made before keep theirs.",
    )
    home: Path = Field(
        default=Path(".firn"),
        description="Project-owned directory for the local stack: downloads, data, logs.",
    )
    kafka_port: int = Field(
        default=19092,
        ge=0,
        le=65535,
        description="Port of the local Kafka broker (0 picks a free one).",
    )
    postgres_port: int = Field(
        default=55432,
        ge=0,
        le=65535,
        description="Port of the local Postgres server (0 picks a free one).",
    )
    service_heartbeat_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How often a running service records that it is alive.",
    )
    kafka_stuck_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A consume-loop service replaces its Kafka consumer when the consumer "
        "group has had no coordinator this long (librdkafka sometimes never finds it again "
        "after a broker restart).",
    )
    commit_event_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How long asking whether a commit's event was acknowledged "
        "(Table.last_event_delivered), and closing a catalog with events queued, waits "
        "for Kafka; a commit itself does not wait: it is durable either way.",
    )
    executor_memory_budget: Bytes = Field(
        default=1 << 30,
        description="Memory one compaction task may hold for change rows before it "
        "spills sorted runs to disk; bytes or e.g. '512MiB'.",
    )
    dispatcher_max_concurrent_tasks: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="Most compaction tasks one dispatcher runs at once (one Spark job).",
    )
    dispatcher_memory_budget: Bytes = Field(
        default=4 << 30,
        description="Memory the tasks one dispatcher runs at once may need together, by "
        "their estimates; a task larger than this runs alone. Bytes or e.g. '8GiB'.",
    )
    dispatcher_local_bytes: Bytes = Field(
        default=8 << 20,
        description="A batch of tasks reading at most this much in all runs in the "
        "dispatcher's own process instead of as a Spark job (a job's fixed cost exceeds "
        "such a merge); 0: always Spark. Bytes or e.g. '16MiB'.",
    )
    dispatcher_local_processes: int = Field(
        default=2,
        ge=0,
        le=64,
        description="Worker processes the dispatcher runs batches of at most "
        "dispatcher_local_bytes on (firn.engine.worker_pool): its tasks merge this many "
        "at a time; 0: in the dispatcher's own process, on dispatcher_local_threads threads. "
        "They run dispatcher_local_nice below the rest of the machine.",
    )
    dispatcher_local_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="How much lower the merge worker processes run than the rest of "
        "the machine (Unix niceness, 0 to 19): merges are background work, and on a "
        "machine shared with producers and the catalog the commits in flight get the "
        "cores first; merges still take all of an idle machine. 0: the dispatcher's own "
        "priority.",
    )
    dispatcher_local_threads: int = Field(
        default=2,
        ge=1,
        le=64,
        description="With dispatcher_local_processes 0, threads a small batch runs on in "
        "the dispatcher's own process; 1: one task after another.",
    )
    executor_spill_dir: Path | None = Field(
        default=None,
        description="Local directory for spilled runs; unset means the system temp dir.",
    )
    metrics_check_interval: Seconds = Field(
        default=600.0,
        description="How often the metrics service re-reads every partition from the "
        "catalog (lost commit events, restarts, time-based triggers); seconds or e.g. '10min'.",
    )
    prometheus_host: str = Field(
        default="127.0.0.1",
        description="Address the services' Prometheus endpoints listen on; 127.0.0.1 is "
        "this host only, 0.0.0.0 every interface (what a scraper on another machine or in "
        "another container needs; Firn's image sets it).",
    )
    metrics_prometheus_port: int = Field(
        default=9461,
        ge=0,
        le=65535,
        description="Port of the metrics service's /metrics endpoint (0: none).",
    )
    planner_prometheus_port: int = Field(
        default=9462,
        ge=0,
        le=65535,
        description="Port of the planner's /metrics endpoint (0: none).",
    )
    dispatcher_prometheus_port: int = Field(
        default=9463,
        ge=0,
        le=65535,
        description="Port of the dispatcher's /metrics endpoint (0: none).",
    )
    committer_prometheus_port: int = Field(
        default=9464,
        ge=0,
        le=65535,
        description="Port of the committer's /metrics endpoint (0: none).",
    )
    publisher_prometheus_port: int = Field(
        default=9465,
        ge=0,
        le=65535,
        description="Port of the publisher's /metrics endpoint (0: none).",
    )
    iceberg_catalog: str = Field(
        default="firn",
        min_length=1,
        max_length=255,
        description="Name of the Iceberg SQL catalog Firn publishes its tables in: the name "
        "readers pass to pyiceberg's load_catalog or Spark's spark.sql.catalog.NAME.",
    )
    iceberg_rest_host: str = Field(
        default="127.0.0.1",
        description="Address the read-only Iceberg REST catalog listens on (0.0.0.0: every "
        "interface).",
    )
    iceberg_rest_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the read-only Iceberg REST catalog the publisher serves over the "
        "published tables (0: none); `firn iceberg serve` takes it, or 9181 when 0.",
    )
    publisher_sweep_interval: Seconds = Field(
        default=5.0,
        description="How often the publisher looks for tables whose Iceberg table is "
        "behind (a compaction event normally wakes it first).",
    )
    publisher_min_interval: Seconds = Field(
        default=5.0,
        description="A compaction event publishes its table at once only if this publisher "
        "has not published it for this long; otherwise the next sweep does, with every "
        "compaction in between as one Iceberg snapshot (0: every event publishes).",
    )
    publisher_gather: Seconds = Field(
        default=1.0,
        description="How long a compaction event's publication waits for the table's "
        "other compactions, so that one Iceberg snapshot takes in all that land "
        "meanwhile (a commit makes a table's partitions due together; 0: publish at once).",
    )
    prometheus_catalog_timeout: Seconds = Field(
        default=5.0,
        description="Longest the metrics service's catalog reading may take (connecting "
        "and each query) when Prometheus scrapes it; past it the scrape reports an error.",
    )
    prometheus_catalog_refresh: Seconds = Field(
        default=10.0,
        description="How long one catalog reading serves scrapes before the next scrape "
        "reads the catalog again, so many scrapers cost one reading.",
    )
    dashboard_host: str = Field(
        default="127.0.0.1",
        description="Address the web dashboard listens on; 127.0.0.1 is this host only, "
        "0.0.0.0 every interface.",
    )
    dashboard_port: int = Field(
        default=9470,
        ge=0,
        le=65535,
        description="Port of the web dashboard (`firn dashboard`, started by `firn up`); "
        "0: `firn up` starts none and `firn dashboard` picks a free port.",
    )
    dashboard_token: SecretStr | None = Field(
        default=None,
        description="The token the dashboard's one action (request a compaction) needs; "
        "unset: the action is disabled and the dashboard is read-only.",
    )
    dashboard_operators: bool = Field(
        default=False,
        description="The dashboard's action asks for a Postgres login (role and password) "
        "instead of the token, and takes it only from a member of firn_operator or of the "
        "catalog's owner; each request is logged with its role.",
    )
    dashboard_timeout: Seconds = Field(
        default=5.0,
        description="Longest a dashboard page may spend on the catalog (connecting and "
        "each query); past it the page reports the error (HTTP 503).",
    )
    application_name: str = Field(
        default="firn",
        description="Postgres application_name of Firn's connections; each service sets "
        "firn-NAME, so pg_stat_activity shows which service holds or waits for what.",
    )
    log_level: str = Field(default="INFO", description="Python logging level.")

    @field_validator("database_schema")
    @classmethod
    def _schema_is_identifier(cls, value: str) -> str:
        if not _SCHEMA_NAME.fullmatch(value):
            raise ValueError(f"database_schema must be a lower-case SQL identifier, got {value!r}")
        return value

    @field_validator("topic_prefix")
    @classmethod
    def _prefix_makes_topic_names(cls, value: str) -> str:
        if not _TOPIC_PREFIX.fullmatch(value):
            raise ValueError(
                "topic_prefix may use only letters, digits, '.', '_', '-' "
                f"(at most 200), got {value!r}"
            )
        return value

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, value: Path) -> Path:
        # Relative paths meant different places to Maven, Java and the services
        # (`make demo` on a fresh clone once fetched the Kafka jars into a nested
        # folder); every process gets the same absolute home instead.
        return value.expanduser().resolve()

    @field_validator("kafka_config")
    @classmethod
    def _no_owned_or_secret_properties(
        cls, value: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        for key in value:
            if key in KAFKA_SECRETS:
                raise ValueError(
                    f"kafka_config must not hold the secret {key!r}: set {KAFKA_SECRETS[key]}"
                )
            if "password" in key or "secret" in key:
                raise ValueError(
                    f"kafka_config must not hold the secret {key!r}; Firn supports "
                    f"{', '.join(sorted(KAFKA_SECRETS))} through their own settings"
                )
            if key in KAFKA_OWNED:
                raise ValueError(f"kafka_config must not set {key!r}: {KAFKA_OWNED[key]}")
        return value

    @model_validator(mode="after")
    def _insync_within_replication(self) -> FirnSettings:
        if self.min_insync_replicas() > self.topic_replication:
            raise ValueError(
                f"topic_min_insync_replicas ({self.topic_min_insync_replicas}) exceeds "
                f"topic_replication ({self.topic_replication}): no acks=all write could succeed"
            )
        return self

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError(f"unknown log level {value!r}")
        return level

    def with_local_stack(self) -> FirnSettings:
        """These settings with an unset database URL or Kafka address taken from the
        local stack that ``firn up`` is running in ``home`` (if it is)."""
        if self.database_url is not None and self.kafka_bootstrap is not None:
            return self
        try:
            state = json.loads((self.home / "stack.json").read_text())
        except (OSError, ValueError):
            return self
        updates: dict[str, object] = {}
        if self.database_url is None and state.get("database_url"):
            updates["database_url"] = SecretStr(state["database_url"])
        if self.kafka_bootstrap is None and state.get("kafka_bootstrap"):
            updates["kafka_bootstrap"] = state["kafka_bootstrap"]
        return self.model_copy(update=updates)

    def database_dsn(self) -> str:
        """The catalog URL; raises ``ConfigError`` when none is configured."""
        if self.database_url is None:
            raise ConfigError(
                "no database: set FIRN_DATABASE_URL or start the local stack with `firn up`"
            )
        return self.database_url.get_secret_value()

    def kafka_servers(self) -> str:
        """The Kafka bootstrap servers; raises ``ConfigError`` when none are configured."""
        if not self.kafka_bootstrap:
            raise ConfigError(
                "no Kafka: set FIRN_KAFKA_BOOTSTRAP or start the local stack with `firn up`"
            )
        return self.kafka_bootstrap

    def kafka_client_config(self) -> dict[str, Any]:
        """The librdkafka properties every Firn client starts from: the bootstrap
        servers, the ``kafka_config`` pass-through, and the secrets."""
        config: dict[str, Any] = {"bootstrap.servers": self.kafka_servers(), **self.kafka_config}
        if self.kafka_sasl_password is not None:
            config["sasl.password"] = self.kafka_sasl_password.get_secret_value()
        if self.kafka_ssl_key_password is not None:
            config["ssl.key.password"] = self.kafka_ssl_key_password.get_secret_value()
        return config

    def prometheus_port(self, service: str) -> int:
        """The /metrics port of ``service`` (metrics, planner, dispatcher, committer,
        publisher); 0 when it serves none."""
        port = getattr(self, f"{service}_prometheus_port", None)
        if not isinstance(port, int):
            raise ConfigError(f"no Prometheus port setting for service {service!r}")
        return port

    def min_insync_replicas(self) -> int:
        """min.insync.replicas of Firn's topics: the setting, else one fewer than the
        replication factor, so acks=all survives one broker down."""
        if self.topic_min_insync_replicas is not None:
            return self.topic_min_insync_replicas
        return max(1, self.topic_replication - 1)
