"""How the metrics Faust app reaches Kafka: the same cluster, security and producer
guarantees as the confluent-kafka services, translated for Faust (aiokafka).

Faust does not take librdkafka properties, so ``FIRN_KAFKA_CONFIG`` is mapped:

- ``security.protocol`` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
- ``sasl.mechanism`` (or ``sasl.mechanisms``) PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512,
  with ``sasl.username`` and ``FIRN_KAFKA_SASL_PASSWORD``;
- ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location`` with
  ``FIRN_KAFKA_SSL_KEY_PASSWORD``, ``ssl.endpoint.identification.algorithm``
  (``https`` or ``none``) and ``enable.ssl.certificate.verification`` become one
  ``ssl.SSLContext``.

Any other security property (GSSAPI, OAUTHBEARER, keystores, CRLs...) is refused at
start-up with a ``ConfigError``: the metrics service must never quietly connect with
less security than the other services. Other properties (tuning such as
``client.id`` or ``socket.keepalive.enable``) do not apply to aiokafka and are
logged as ignored.

Faust's aiokafka producer is idempotent only inside transactions; the transport
below makes every producer of the app idempotent with ``acks=all``, as every
confluent-kafka producer of Firn is.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from typing import Any

import faust
from faust.transport.drivers import aiokafka as aiokafka_driver

from firn.errors import ConfigError
from firn.settings import FirnSettings

log = logging.getLogger(__name__)

SASL_MECHANISMS = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
_MAPPED = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
}
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "enable.ssl.")


class _IdempotentProducer(aiokafka_driver.Producer):
    def _settings_extra(self) -> Mapping[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


class IdempotentTransport(aiokafka_driver.Transport):
    """Faust's aiokafka transport whose producers are idempotent with acks=all."""

    Producer = _IdempotentProducer


def broker_credentials(settings: FirnSettings) -> faust.types.auth.CredentialsT | None:
    """Faust credentials equivalent to the pass-through; None for PLAINTEXT."""
    config = settings.kafka_client_config()
    unsupported = sorted(key for key in settings.kafka_config if key.startswith(_SECURITY_PREFIXES))
    unsupported = [key for key in unsupported if key not in _MAPPED]
    if unsupported:
        raise ConfigError(
            f"the metrics service (Faust) cannot apply {', '.join(unsupported)}; "
            "see services/metrics/kafka_access.py for what it supports"
        )
    ignored = sorted(key for key in settings.kafka_config if not key.startswith(_SECURITY_PREFIXES))
    if ignored:
        log.warning("Kafka properties not applied by the metrics service: %s", ignored)
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown security.protocol {protocol!r}")
    context = _ssl_context(config) if protocol.endswith("SSL") else None
    if protocol.startswith("SASL"):
        mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI")))
        if mechanism.upper() not in SASL_MECHANISMS:
            raise ConfigError(
                f"the metrics service (Faust) supports SASL {sorted(SASL_MECHANISMS)}, "
                f"not {mechanism!r}"
            )
        return faust.SASLCredentials(
            username=config.get("sasl.username"),
            password=config.get("sasl.password"),
            mechanism=mechanism.upper(),
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def _ssl_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=config.get("ssl.ca.location")
    )
    if config.get("ssl.certificate.location"):
        context.load_cert_chain(
            config["ssl.certificate.location"],
            keyfile=config.get("ssl.key.location"),
            password=config.get("ssl.key.password"),
        )
    algorithm = str(config.get("ssl.endpoint.identification.algorithm", "https")).lower()
    if algorithm not in {"https", "none"}:
        raise ConfigError(f"unknown ssl.endpoint.identification.algorithm {algorithm!r}")
    context.check_hostname = algorithm == "https"
    if str(config.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
