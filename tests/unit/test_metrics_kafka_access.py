"""The metrics service's Faust app reaches Kafka as the other services do (no I/O
beyond a temp directory: the app is built, never started)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import certifi
import faust
import pytest
from pydantic import SecretStr

from firn.errors import ConfigError
from firn.settings import FirnSettings
from firn_services.metrics.app import create_app
from firn_services.metrics.kafka_access import broker_credentials


def _settings(tmp_path: Path, **values: Any) -> FirnSettings:
    return FirnSettings(kafka_bootstrap="127.0.0.1:9", home=tmp_path, **values)


def test_plaintext_needs_no_credentials(tmp_path: Path) -> None:
    assert broker_credentials(_settings(tmp_path)) is None


def test_sasl_ssl_scram_maps_to_faust_credentials(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        kafka_config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "firn-metrics",
            "ssl.ca.location": certifi.where(),
        },
        kafka_sasl_password=SecretStr("pw"),
    )
    credentials = broker_credentials(settings)
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.username, credentials.password) == ("firn-metrics", "pw")
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.ssl_context is not None
    assert credentials.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert credentials.ssl_context.check_hostname


def test_ssl_without_hostname_check_maps_to_an_ssl_context(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        kafka_config={
            "security.protocol": "SSL",
            "ssl.endpoint.identification.algorithm": "none",
        },
    )
    credentials = broker_credentials(settings)
    assert isinstance(credentials, faust.SSLCredentials)
    assert not credentials.context.check_hostname


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "GSSAPI"),
        ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "ssl.keystore"),
        ({"security.protocol": "TLS"}, "TLS"),
    ],
)
def test_what_faust_cannot_honour_is_refused_not_dropped(
    tmp_path: Path, config: dict[str, str], refused: str
) -> None:
    with pytest.raises(ConfigError, match=refused):
        broker_credentials(_settings(tmp_path, kafka_config=config))


def test_the_app_produces_idempotently_and_replicates_its_topics(tmp_path: Path) -> None:
    settings = _settings(tmp_path, topic_partitions=6, topic_replication=3)
    app = create_app(settings, reader=None)  # type: ignore[arg-type]
    assert app.producer._settings_extra() == {"acks": "all", "enable_idempotence": True}
    assert (app.conf.topic_partitions, app.conf.topic_replication_factor) == (6, 3)
    changelog = app.tables["partitions"].changelog_topic
    assert changelog.partitions == 6
    assert changelog.config == {"min.insync.replicas": "2"}
