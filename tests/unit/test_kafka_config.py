"""How Firn's Kafka clients and topics are configured from the settings (no I/O)."""

from __future__ import annotations

import re
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.cimpl import NewTopic
from pydantic import SecretStr, ValidationError

import firn.kafka.topics as topics_module
from firn.errors import ConfigError, ServiceError
from firn.kafka.clients import admin_config, consumer_config, producer_config
from firn.kafka.topics import create_topics, new_topics, wait_until_visible
from firn.settings import FirnSettings

SECURED = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "firn-planner",
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def _settings(**values: object) -> FirnSettings:
    return FirnSettings(kafka_bootstrap="k1:9092,k2:9092", **values)  # type: ignore[arg-type]


def test_every_producer_is_idempotent_and_waits_for_all_replicas() -> None:
    config = producer_config(_settings(), **{"client.id": "x", "linger.ms": 50})
    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"
    assert (config["client.id"], config["linger.ms"]) == ("x", 50)


@pytest.mark.parametrize(("key", "value"), [("enable.idempotence", False), ("acks", "1")])
def test_an_override_cannot_weaken_a_producer(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        producer_config(_settings(), **{key: value})


def test_consumers_never_store_an_offset_by_themselves() -> None:
    # Only the consume loop stores an offset, after the side effect is durable; the
    # consumer commits what was stored.
    config = consumer_config(_settings(), "g")
    assert config["enable.auto.offset.store"] is False
    assert config["group.id"] == "g"
    with pytest.raises(ConfigError, match=r"enable\.auto\.offset\.store"):
        consumer_config(_settings(), "g", **{"enable.auto.offset.store": True})


def test_a_killed_consumer_holds_its_partitions_ten_seconds_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert consumer_config(_settings(), "g")["session.timeout.ms"] == 10_000
    monkeypatch.setenv("FIRN_KAFKA_CONFIG", '{"session.timeout.ms": 45000}')
    assert consumer_config(_settings(), "g")["session.timeout.ms"] == 45000


def test_the_pass_through_and_secrets_reach_every_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "FIRN_KAFKA_CONFIG",
        '{"security.protocol": "SASL_SSL", '
        '"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "firn-planner", '
        '"ssl.ca.location": "/etc/kafka/ca.pem"}',
    )
    monkeypatch.setenv("FIRN_KAFKA_SASL_PASSWORD", "s3cret")
    monkeypatch.setenv("FIRN_KAFKA_SSL_KEY_PASSWORD", "k3y")
    monkeypatch.setenv("FIRN_KAFKA_BOOTSTRAP", "k1:9093")
    settings = FirnSettings()
    expected = {
        "bootstrap.servers": "k1:9093",
        **SECURED,
        "sasl.password": "s3cret",
        "ssl.key.password": "k3y",
    }
    for config in (
        admin_config(settings),
        producer_config(settings),
        consumer_config(settings, "g"),
    ):
        assert expected.items() <= config.items()
    assert "s3cret" not in repr(settings)
    assert "k3y" not in repr(settings)


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("sasl.password", "FIRN_KAFKA_SASL_PASSWORD"),
        ("ssl.key.password", "FIRN_KAFKA_SSL_KEY_PASSWORD"),
        ("ssl.keystore.password", "secret"),
        ("bootstrap.servers", "FIRN_KAFKA_BOOTSTRAP"),
        ("acks", "all in-sync replicas"),
        ("enable.idempotence", "idempotent"),
    ],
)
def test_secrets_and_firn_owned_properties_are_refused_in_the_pass_through(
    key: str, hint: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(hint)):
        _settings(kafka_config={key: "x"})


def test_topics_are_created_with_the_configured_partitions_and_replication() -> None:
    settings = _settings(topic_partitions=12, topic_replication=3)
    (commits, dlq) = new_topics(settings, ("p.commits", "p.dlq"))
    for topic in (commits, dlq):
        assert (topic.num_partitions, topic.replication_factor) == (12, 3)
        # One broker may be down while acks=all writes still succeed.
        assert topic.config == {"min.insync.replicas": "2"}
    (single,) = new_topics(settings, ("p.x",), partitions=1)
    assert (single.num_partitions, single.replication_factor) == (1, 3)


def test_topic_defaults_are_four_partitions_on_one_replica() -> None:
    (topic,) = new_topics(_settings(), ("p.commits",))
    assert (topic.num_partitions, topic.replication_factor, topic.config) == (4, 1, {})


def test_min_insync_replicas_can_be_set_but_not_above_the_replication() -> None:
    settings = _settings(topic_replication=5, topic_min_insync_replicas=3)
    (topic,) = new_topics(settings, ("p.commits",))
    assert topic.config == {"min.insync.replicas": "3"}
    with pytest.raises(ValidationError, match="exceeds"):
        _settings(topic_replication=2, topic_min_insync_replicas=3)


def test_the_sasl_password_is_a_secret() -> None:
    settings = _settings(kafka_sasl_password=SecretStr("pw"))
    assert "pw" not in repr(settings)
    assert admin_config(settings)["sasl.password"] == "pw"


class _Partition:
    def __init__(self, leader: int) -> None:
        self.leader = leader


class _Topic:
    def __init__(self, leaders: list[int], error: object = None) -> None:
        self.partitions = {number: _Partition(leader) for number, leader in enumerate(leaders)}
        self.error = error


class _Metadata:
    def __init__(self, topics: dict[str, _Topic]) -> None:
        self.topics = topics


class _AdminSeeingLater:
    """A broker whose metadata shows each topic only after some requests, and then
    first without a leader for its last partition."""

    def __init__(self, absent_for: dict[str, int]) -> None:
        self.absent_for = dict(absent_for)
        self.asked: list[str] = []

    def list_topics(self, *, topic: str, timeout: float) -> _Metadata:
        self.asked.append(topic)
        left = self.absent_for[topic]
        self.absent_for[topic] = left - 1
        if left > 1:
            return _Metadata({})
        if left == 1:
            return _Metadata({topic: _Topic([0, -1])})
        return _Metadata({topic: _Topic([0, 0])})


def test_created_topics_are_waited_for_until_every_partition_has_a_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics_module, "VISIBLE_POLL_SECONDS", 0.0)
    admin = _AdminSeeingLater({"a": 3, "b": 0})
    wait_until_visible(admin, ("a", "b"), timeout=5.0)  # type: ignore[arg-type]
    # "a" is absent twice, then leaderless once, then whole; "b" whole at once.
    assert admin.asked == ["a", "a", "a", "a", "b"]


def test_a_topic_that_never_gets_leaders_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics_module, "VISIBLE_POLL_SECONDS", 0.0)
    admin = _AdminSeeingLater({"late": 10**9})
    with pytest.raises(ServiceError, match=r"topic late .* no leader"):
        wait_until_visible(admin, ("late",), timeout=0.05)  # type: ignore[arg-type]


class _AdminOfAFencedBroker:
    """A broker that refuses topics as fenced for its first ``fenced`` requests
    (just restarted: fenced until its first heartbeat), and says "exists" for one."""

    def __init__(self, fenced: int, existing: str = "") -> None:
        self.fenced = fenced
        self.existing = existing
        self.asked: list[list[str]] = []

    def create_topics(self, topics: list[NewTopic], **_: float) -> dict[str, Future[None]]:
        self.asked.append([t.topic for t in topics])
        futures: dict[str, Future[None]] = {}
        for t in topics:
            future: Future[None] = Future()
            if self.fenced > 0:
                code = KafkaError.INVALID_REPLICATION_FACTOR
                future.set_exception(KafkaException(KafkaError(code, "all brokers are fenced")))
            elif t.topic == self.existing:
                future.set_exception(KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS)))
            else:
                future.set_result(None)
            futures[t.topic] = future
        self.fenced -= 1
        return futures


def test_topics_a_fenced_broker_refuses_are_asked_for_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics_module, "CREATE_RETRY_SECONDS", 0.0)
    admin = _AdminOfAFencedBroker(fenced=2, existing="b")
    wanted = new_topics(_settings(), ("a", "b"))
    create_topics(admin, wanted, timeout=5.0)  # type: ignore[arg-type]
    assert admin.asked == [["a", "b"], ["a", "b"], ["a", "b"]]


def test_a_broker_fenced_past_the_timeout_is_an_error_naming_the_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics_module, "CREATE_RETRY_SECONDS", 0.0)
    admin = _AdminOfAFencedBroker(fenced=10**9)
    with pytest.raises(ServiceError, match=r"cannot create topic a: .*fenced"):
        create_topics(admin, new_topics(_settings(), ("a",)), timeout=0.05)  # type: ignore[arg-type]
