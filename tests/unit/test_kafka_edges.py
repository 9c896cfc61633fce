"""Pure pieces of the Kafka edge: topic naming and event decoding."""

from __future__ import annotations

import pytest

from firn.kafka.loop import UnhandledEventError, decode
from firn.kafka.topics import Topics


def test_every_topic_derives_from_the_prefix() -> None:
    topics = Topics("t1.")
    assert topics.all() == (
        "t1.commits",
        "t1.plan-requests",
        "t1.plan-tasks",
        "t1.task-results",
        "t1.compactions",
        "t1.metrics-updates",
        "t1.dlq",
    )
    assert Topics().commits == "firn.commits"


def test_decode_returns_the_event_object() -> None:
    assert decode(b'{"event_type": "commit", "seq": 3}') == {"event_type": "commit", "seq": 3}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty"),
        (b"\xff\xfe", "not JSON"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "event_type"),
        (b'{"seq": 1}', "event_type"),
        (b'{"event_type": 7}', "event_type"),
    ],
)
def test_undecodable_values_are_unhandled_not_retryable(value: bytes | None, reason: str) -> None:
    with pytest.raises(UnhandledEventError, match=reason) as caught:
        decode(value)
    assert caught.value.retryable is False
