"""Typed settings, read once from the environment (prefix ``FIRN_``) and passed down.

Nothing else in Firn reads ``os.environ`` for its configuration: ``main`` builds one
``FirnSettings`` and hands it to whatever needs it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from firn.errors import ConfigError
from firn.table.properties import Bytes, Seconds

# Matched whole (fullmatch): with ``$`` a trailing newline would pass.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._\-]{0,200}")
"""Kafka's topic characters; 200 leaves room for the longest name made from it
(``<prefix>metrics-partitions-changelog``) within Kafka's 249."""


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
    topic_prefix: str = Field(
        default="firn.",
        description="Prefix of every Firn topic, e.g. firn.commits (tests use one per test).",
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
    commit_event_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How long a producer commit waits for Kafka to acknowledge its event; "
        "the commit is durable either way.",
    )
    executor_memory_budget: Bytes = Field(
        default=1 << 30,
        description="Memory one compaction task may hold for change rows before it "
        "spills sorted runs to disk; bytes or e.g. '512MiB'.",
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
