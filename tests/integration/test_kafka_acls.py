"""Firn on a Kafka that authenticates and authorizes: SASL (SCRAM-SHA-512) over TLS,
``StandardAuthorizer``, and the ACLs of ``firn kafka-acls``. The four services and a
producer each log in as their own principal and the pipeline compacts the table to
the reference model, while a client without credentials, with a wrong password or
not trusting the stack's CA is turned away, and a producer that writes
``plan-tasks`` (or reads ``commits``), or a service that writes another's topic, is
refused. No password shows in a service's log.

Whichever backend the other suites use, this one starts the local runner's broker
with its security on (a broker that requires credentials is what it is about) and
the suite's Postgres."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pydantic import SecretStr

import firn
from firn.kafka import Topics
from firn.kafka.acls import ROLES, password_variable, principal
from firn.settings import FirnSettings
from firn_localstack import KafkaBroker
from firn_localstack.kafka_security import BrokerSecurity
from firn_localstack.tls import server_certificate
from tests.integration.backends import Backend
from tests.integration.cdc_workload import PROPERTIES, SCHEMA, CdcProducer, wait_until_settled
from tests.integration.service_processes import running_services

REPO = Path(__file__).resolve().parents[2]
SERVICES = ["metrics", "planner", "dispatcher", "committer"]
PASSWORDS = {role: secrets.token_urlsafe(18) for role in ROLES}


@pytest.fixture(scope="module")
def secured() -> Iterator[tuple[KafkaBroker, BrokerSecurity]]:
    home = REPO / ".firn" / f"test-kafka-acls-{uuid.uuid4().hex[:8]}"
    security = BrokerSecurity.create(home / "tls")
    broker = KafkaBroker(REPO / ".firn" / "cache", home / "kafka", security=security)
    broker.start()
    try:
        yield broker, security
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)


def _as(settings: FirnSettings, security: BrokerSecurity, role: str) -> FirnSettings:
    """``settings`` logging in to Kafka as the principal of ``role``."""
    return settings.model_copy(
        update={
            "kafka_config": security.client_config(principal(role)),
            "kafka_sasl_password": SecretStr(PASSWORDS[role]),
        }
    )


def _login(security: BrokerSecurity, role: str) -> dict[str, str]:
    """The variables that make a service process log in as ``role``."""
    return {
        "FIRN_KAFKA_CONFIG": json.dumps(security.client_config(principal(role))),
        "FIRN_KAFKA_SASL_PASSWORD": PASSWORDS[role],
    }


def _client(broker: KafkaBroker, **config: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap, **config}


def _logged_in(broker: KafkaBroker, security: BrokerSecurity, role: str) -> dict[str, Any]:
    """A librdkafka client's properties as the principal of ``role``."""
    return _client(
        broker, **security.client_config(principal(role)), **{"sasl.password": PASSWORDS[role]}
    )


def _produce_error(config: dict[str, Any], topic: str) -> int | None:
    """The error code the broker answered to one message sent to ``topic``."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 15000})
    producer.produce(topic, b"forged", on_delivery=lambda error, _msg: outcome.append(error))
    producer.flush(30)
    assert outcome, "the send was answered"
    return None if outcome[0] is None else outcome[0].code()


def test_services_and_a_producer_on_sasl_over_tls_with_acls_and_the_refusals(
    secured: tuple[KafkaBroker, BrokerSecurity],
    postgres: Backend,
    base_settings: FirnSettings,
    tmp_path: Path,
    unique: str,
) -> None:
    broker, security = secured
    admin_settings = base_settings.model_copy(
        update={
            "database_url": SecretStr(postgres.address),
            "kafka_bootstrap": broker.bootstrap,
            "kafka_config": security.client_config("admin", "PLAIN"),
            "kafka_sasl_password": SecretStr(security.admin_password),
            "database_schema": f"test_{unique}",
            "topic_prefix": f"test-{unique}.",
            "warehouse": str(tmp_path / "warehouse"),
            "home": tmp_path / "home",
        }
    )
    topics = Topics.from_settings(admin_settings)

    # The administrator's one step: topics, users and ACLs (the CLI's contract).
    made = subprocess.run(
        [sys.executable, "-m", "firn", "kafka-acls", "--users", "--json"],
        cwd=REPO,
        env={
            **os.environ,
            "FIRN_KAFKA_BOOTSTRAP": broker.bootstrap,
            "FIRN_KAFKA_CONFIG": json.dumps(security.client_config("admin", "PLAIN")),
            "FIRN_KAFKA_SASL_PASSWORD": security.admin_password,
            "FIRN_TOPIC_PREFIX": admin_settings.topic_prefix,
            **{password_variable(role): pw for role, pw in PASSWORDS.items()},
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    answer = json.loads(made.stdout)
    assert sorted(answer["users"]) == sorted(principal(role) for role in ROLES)
    assert answer["principals"]["firn-producer"]["writes"] == [topics.commits]

    producer_settings = _as(admin_settings, security, "producer")
    own = {name: _login(security, name) for name in SERVICES}
    with (
        firn.connect(settings=producer_settings) as catalog,
        running_services(
            admin_settings, tmp_path, SERVICES, own, FIRN_METRICS_CHECK_INTERVAL="5"
        ) as svc,
    ):
        table = catalog.create_table("orders", SCHEMA, ["day", "id"], ["day"], PROPERTIES)
        producer = CdcProducer(table, seed=23)
        producer.run(commits=15, per_second=10)

        # Turned away before any request: no credentials, a wrong password, a CA
        # other than the stack's.
        for config in (
            {},
            {**security.client_config("firn-producer"), "sasl.password": "wrong"},
            {
                **security.client_config("firn-producer"),
                "sasl.password": PASSWORDS["producer"],
                "ssl.ca.location": str(server_certificate(tmp_path / "other", "x").ca),
            },
        ):
            with pytest.raises(KafkaException) as refused:
                AdminClient(_client(broker, **config)).list_topics(timeout=5)
            assert refused.value.args[0].code() in {
                KafkaError._TRANSPORT,
                KafkaError._AUTHENTICATION,
                KafkaError._SSL,
            }

        # Authenticated but not allowed: a producer forging a plan task, a planner
        # writing the dispatcher's results, a producer writing outside Firn's topics.
        as_producer = _logged_in(broker, security, "producer")
        refused_write = KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _produce_error(as_producer, topics.plan_tasks) == refused_write
        as_planner = _logged_in(broker, security, "planner")
        assert _produce_error(as_planner, topics.task_results) == refused_write
        assert _produce_error(as_producer, topics.commits + "-not-firn") == refused_write

        # A service with a wrong password stops at once and says why.
        wrong = subprocess.run(
            [sys.executable, "-m", "firn", "service", "planner"],
            cwd=REPO,
            env={**svc.env, **_login(security, "planner"), "FIRN_KAFKA_SASL_PASSWORD": "wr0ng"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert wrong.returncode == 1
        assert "Kafka refused this client as 'firn-planner'" in wrong.stderr
        assert "wr0ng" not in wrong.stderr + wrong.stdout

        # A producer reading the commit stream.
        reader = Consumer({**as_producer, "group.id": f"{topics.prefix}metrics"})
        try:
            reader.subscribe([topics.commits])
            message = reader.poll(15)
            assert message is not None
            error = message.error()
            assert error is not None
            assert error.code() in {
                KafkaError.TOPIC_AUTHORIZATION_FAILED,
                KafkaError.GROUP_AUTHORIZATION_FAILED,
            }
        finally:
            reader.close()

        # The pipeline carried on through all of it.
        producer.run(commits=15, per_second=10)
        svc.assert_running()
        wait_until_settled(table, svc, timeout=240)
        producer.check()
        (compactions,) = catalog.conn.execute(
            "SELECT count(*) FROM snapshot WHERE table_id = %s AND kind = 'compaction'",
            (table.table_id,),
        ).fetchone() or (0,)
        assert compactions > 0

    # No password in a log line, an event or a dead letter.
    logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    events = _everything_on(broker, security, topics)
    assert events, "the topics hold the run's events"
    for secret in (*PASSWORDS.values(), security.admin_password):
        assert secret not in logs
        assert secret.encode() not in events


def _everything_on(broker: KafkaBroker, security: BrokerSecurity, topics: Topics) -> bytes:
    """Every key and value on the Firn topics, read as the broker's admin."""
    reader = Consumer(
        _client(
            broker,
            **security.admin_config(),
            **{"group.id": f"audit-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"},
        )
    )
    found = bytearray()
    try:
        reader.subscribe(list(topics.all()))
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 5:
            message = reader.poll(0.5)
            if message is None or message.error() is not None:
                continue
            found += (message.key() or b"") + (message.value() or b"")
            quiet_since = time.monotonic()
    finally:
        reader.close()
    return bytes(found)
