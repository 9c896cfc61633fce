"""A message round-trip through the real broker with confluent-kafka."""

from __future__ import annotations

from firn.kafka import Topics, ensure_topics, producer
from firn.settings import FirnSettings
from tests.waiting import messages_on


def test_messages_round_trip_in_key_order(settings: FirnSettings, unique: str) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    ensure_topics(settings, topics.all())  # idempotent: no error the second time

    out = producer(settings)
    sent = [(f"table-{i % 3}".encode(), f"{i}".encode()) for i in range(30)]
    for key, value in sent:
        out.produce(topics.commits, key=key, value=value)
    assert out.flush(30) == 0

    read = messages_on(settings, topics.commits, f"test-{unique}", expect=len(sent))
    received = [(m.key(), m.value()) for m in read]

    assert sorted(received) == sorted(sent)
    # Messages of one key keep their order: the property per-partition ordering of
    # table events will rely on.
    for key in {k for k, _ in sent}:
        assert [v for k, v in received if k == key] == [v for k, v in sent if k == key]
