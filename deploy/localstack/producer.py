"""``firn demo``: the demo producer alone, against a stack that runs elsewhere.

``firn up --demo`` starts Postgres, Kafka and the services around the producer; a
stack that already runs (``docker compose``, a deployment, another ``firn up``) only
needs the producer, pointed at it by ``FIRN_DATABASE_URL``, ``FIRN_KAFKA_BOOTSTRAP``
and ``FIRN_WAREHOUSE``. The services' processes are not this one's to measure, so
the summary's resources cover the producer only, and no idle window is measured
unless ``--idle-seconds`` asks for one.

Started beside the services (``docker compose --profile demo up``), the producer
may commit before any service has created the topics; it creates the commit topic
itself first, as a service would, rather than let a broker that auto-creates topics
make it with its own partition count.
"""

from __future__ import annotations

import threading
from typing import Any

from firn.kafka import Topics, ensure_topics
from firn.settings import FirnSettings
from firn.signals import stop_on_signals

from .demo import DemoOptions
from .demo_run import run_demo


def demo(settings: FirnSettings, options: dict[str, Any], *, as_json: bool = False) -> int:
    """Produce until SIGINT, SIGTERM or ``duration``, then print the summary; the
    exit status is 1 when the table did not match the producer's model."""
    demo_options = DemoOptions(**{"idle_seconds": 0.0, **options})
    if settings.kafka_bootstrap:
        ensure_topics(settings, (Topics.from_settings(settings).commits,))
    with stop_on_signals(threading.Event()) as stopping:
        return run_demo(settings, demo_options, stopping, dict, as_json=as_json)
