from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import firn
from firn.errors import ConfigError
from firn.settings import FirnSettings


def test_defaults_point_at_the_local_stack_and_spark_local_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("FIRN_DATABASE_URL", "FIRN_KAFKA_BOOTSTRAP", "FIRN_SPARK_MASTER", "FIRN_HOME"):
        monkeypatch.delenv(name, raising=False)
    settings = FirnSettings()
    assert settings.spark_master == "local[*]"
    assert settings.home == Path(".firn").resolve()
    assert (settings.kafka_port, settings.postgres_port) == (19092, 55432)
    with pytest.raises(ConfigError, match="FIRN_DATABASE_URL"):
        settings.database_dsn()
    with pytest.raises(ConfigError, match="FIRN_KAFKA_BOOTSTRAP"):
        settings.kafka_servers()


def test_environment_with_the_firn_prefix_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRN_DATABASE_URL", "postgresql://u:secret@db:5432/x")
    monkeypatch.setenv("FIRN_KAFKA_BOOTSTRAP", "k1:9092,k2:9092")
    monkeypatch.setenv("FIRN_SPARK_MASTER", "spark://master:7077")
    monkeypatch.setenv("FIRN_SPARK_CONF", '{"spark.executor.memory": "2g"}')
    monkeypatch.setenv("FIRN_TABLE_DEFAULTS", '{"minor.file-count": 10}')
    settings = FirnSettings()
    assert settings.database_dsn() == "postgresql://u:secret@db:5432/x"
    assert "secret" not in repr(settings)  # the URL may carry a password
    assert settings.kafka_servers() == "k1:9092,k2:9092"
    assert settings.spark_master == "spark://master:7077"
    assert settings.spark_conf == {"spark.executor.memory": "2g"}
    assert settings.table_defaults == {"minor.file-count": 10}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("database_schema", "Firn; DROP TABLE x"),
        ("database_schema", "1abc"),
        ("database_schema", "firn\n"),
        ("database_schema", "firn\n; drop"),
        ("topic_prefix", "firn.\n"),
        ("topic_prefix", "my topics."),
        ("topic_prefix", "x" * 201),
        ("topic_prefix", "firn/"),
        ("log_level", "LOUD"),
        ("kafka_port", 70000),
        ("service_heartbeat_seconds", 0),
    ],
)
def test_bad_values_are_refused_with_the_field_named(name: str, value: object) -> None:
    with pytest.raises(ValidationError, match=name):
        FirnSettings(**{name: value})


@pytest.mark.parametrize("prefix", ["", "firn.", "test-1a2b.", "A_b-c." + "x" * 194])
def test_topic_prefixes_are_kafka_topic_characters(prefix: str) -> None:
    assert FirnSettings(topic_prefix=prefix).topic_prefix == prefix


@pytest.mark.parametrize(
    ("defaults", "named"),
    [({"minor.file-count": 0}, "minor.file-count"), ({"no.such-property": 1}, "no.such-property")],
)
def test_bad_table_defaults_are_refused_before_the_catalog_is_opened(
    defaults: dict[str, object], named: str
) -> None:
    settings = FirnSettings(database_url="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(ConfigError, match=f"FIRN_TABLE_DEFAULTS: .*{named}"):
        firn.connect(settings=settings.model_copy(update={"table_defaults": defaults}))


def test_settings_are_frozen() -> None:
    settings = FirnSettings()
    with pytest.raises(ValidationError):
        settings.topic_prefix = "other."  # type: ignore[misc]


def test_a_relative_home_is_made_absolute_so_every_process_agrees_on_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FIRN_HOME", "stack-home")
    assert FirnSettings().home == tmp_path.resolve() / "stack-home"
    monkeypatch.setenv("FIRN_HOME", "~/firn-home")
    assert FirnSettings().home == Path.home().resolve() / "firn-home"
