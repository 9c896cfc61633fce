"""Send one message and wait for the broker's verdict on it.

``Producer.flush`` only says how many messages are still queued; it cannot tell a
broker that is briefly away (worth waiting for) from a message the broker will never
take (too large, malformed: retrying it forever stops the service). ``deliver`` keeps
the delivery report of its own message and says which it was.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from firn.errors import FirnError

PERMANENT = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,  # also what the client says before sending
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError._BAD_MSG,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError._INVALID_ARG,
    }
)
"""Errors no retry of the same message can cure."""


class DeliveryError(FirnError):
    """The broker did not acknowledge a message; ``retryable`` is False when it never
    will (the message itself is refused)."""


def deliver(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes,
    headers: list[tuple[str, str | bytes | None]] | None = None,
    timeout: float = 30.0,
) -> None:
    """Produce one message and wait until the broker has it, or raise ``DeliveryError``."""
    reports: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            reports.append(error)

    try:
        producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
    except BufferError as exc:  # the local queue is full: the broker is slow or away
        raise DeliveryError(f"cannot queue a message for {topic}: {exc}", retryable=True) from exc
    except KafkaException as exc:
        raise _refused(topic, exc.args[0], len(value)) from exc
    if producer.flush(timeout) > 0 and not reports:
        raise DeliveryError(
            f"a message for {topic} was not acknowledged within {timeout:.0f}s", retryable=True
        )
    if reports:
        raise _refused(topic, reports[0], len(value))


def _refused(topic: str, error: KafkaError, size: int) -> DeliveryError:
    permanent = error.code() in PERMANENT
    return DeliveryError(
        f"{topic} refused a message of {size} bytes: {error.str()}", retryable=not permanent
    )
