"""Logging set-up and the adapter that attaches ids (service, table, plan, task) to lines."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure(level: str = "INFO") -> None:
    """Configure the root logger once per process (idempotent)."""
    logging.basicConfig(level=level, format=_FORMAT, force=True)
    # The Kafka and Spark client libraries are chatty at INFO; their warnings still show.
    for noisy in ("py4j", "aiokafka", "faust", "mode"):
        logging.getLogger(noisy).setLevel(max(logging.getLevelName(level), logging.WARNING))


class ContextAdapter(logging.LoggerAdapter[logging.Logger]):
    """Prefix every message with ``key=value`` pairs of the work it belongs to."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        context = " ".join(f"{k}={v}" for k, v in (self.extra or {}).items())
        return (f"[{context}] {msg}" if context else msg), kwargs


def with_context(logger: logging.Logger, **ids: object) -> ContextAdapter:
    return ContextAdapter(logger, ids)
