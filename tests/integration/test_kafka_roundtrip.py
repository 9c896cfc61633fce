"""A message round-trip through the real broker with confluent-kafka."""

from __future__ import annotations

import time

from firn.kafka import Topics, consumer, ensure_topics, producer
from firn.settings import FirnSettings


def test_messages_round_trip_in_key_order(settings: FirnSettings, unique: str) -> None:
    topics = Topics.from_settings(settings)
    ensure_topics(settings, topics.all())
    ensure_topics(settings, topics.all())  # idempotent: no error the second time

    out = producer(settings)
    sent = [(f"table-{i % 3}".encode(), f"{i}".encode()) for i in range(30)]
    for key, value in sent:
        out.produce(topics.commits, key=key, value=value)
    assert out.flush(30) == 0

    reader = consumer(settings, group_id=f"test-{unique}")
    reader.subscribe([topics.commits])
    received: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    while len(received) < len(sent) and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            received.append((message.key(), message.value()))
    reader.close()

    assert sorted(received) == sorted(sent)
    # Messages of one key keep their order: the property per-partition ordering of
    # table events will rely on.
    for key in {k for k, _ in sent}:
        assert [v for k, v in received if k == key] == [v for k, v in sent if k == key]
