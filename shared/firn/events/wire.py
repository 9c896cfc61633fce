"""How an event comes off the wire, the same way in every service: a message value
is decoded to a JSON object with an ``event_type`` (``decode``), the consumer looks up
its handler by that type, and the object is checked against its schema and read as
its model from the one registry (``as_event``; ``firn.events.schemas.EVENT_MODELS``).
Handlers receive models, never dicts.

What cannot be read is an ``UnhandledEventError`` or a ``ConfigError``: no retry can
make it succeed, so the consumer parks it in the dead-letter topic with
``dead_letter_reason``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from firn.errors import FirnError
from firn.events.envelope import Event
from firn.events.schemas import EVENT_MODELS, validate


class UnhandledEventError(FirnError):
    """An event that no retry can make succeed: it belongs in the DLQ."""


def decode(value: bytes | None) -> Mapping[str, Any]:
    """The JSON object of a message value, or ``UnhandledEventError``."""
    if value is None:
        raise UnhandledEventError("empty message value")
    try:
        event = json.loads(value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UnhandledEventError(f"not JSON: {exc}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
        raise UnhandledEventError("not an event object with an event_type")
    return event


def as_event(raw: Mapping[str, Any]) -> Event:
    """``raw`` checked against its type's schema and read as that type's model
    (``ConfigError``, which parks it, when it does not match)."""
    payload = dict(raw)
    validate(payload)
    return EVENT_MODELS[payload["event_type"]].model_validate(payload)


def dead_letter_reason(exc: BaseException) -> str:
    """Why a message is parked, for its dead letter: a Firn error says it itself;
    anything else is a bug in a handler, named by its class."""
    if isinstance(exc, FirnError):
        return str(exc)
    return f"unexpected {type(exc).__name__} in the handler: {exc}"
