"""Every metric a Firn service updates as it works, defined once.

The figures read from the catalog on a scrape (backlog, score, read amplification,
tasks by state, stalls) are not here: ``catalog_collector`` yields them. What is
here counts events as they happen in a process; Prometheus tells the processes
apart by their scrape target, so only a ``service`` label is added where one
process may run the code of several services (the consume loop, dead letters).

Label values stay few: tables, partitions, states, services, topics and error
*kinds* (an exception's class name), never free text such as a dead letter's reason.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
"""Seconds from a commit to its compaction: seconds in a demo, hours for a table
compacted on a schedule."""

TASK_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds one compaction task runs: from a small Spark job to a large rewrite."""

PUBLICATION_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
"""Seconds from a Firn commit to its Iceberg publication: the goal is a p95 under 10 s,
so the buckets are fine around it."""

PLANS_COMMITTED = Counter(
    "firn_plans_committed", "Compaction plans committed, by table and kind.", ["table", "kind"]
)
PLANS_FAILED = Counter(
    "firn_plans_failed",
    "Compaction plans that failed: a commit check (committer) or a task out of attempts "
    "(dispatcher).",
    ["table", "stage"],
)
COMPACTION_LATENCY = Histogram(
    "firn_commit_to_compacted_seconds",
    "Per producer commit and partition: seconds from the commit's snapshot to the "
    "compaction snapshot that merged it into the base store.",
    ["table"],
    buckets=LATENCY_BUCKETS,
)
COMMITTED_BYTES = Counter(
    "firn_committed_bytes",
    "Bytes of change files producers committed (seen in commit events).",
    ["table"],
)
REWRITTEN_BYTES = Counter(
    "firn_rewritten_bytes",
    "Bytes of files compactions wrote; write amplification is (committed + rewritten) / committed.",
    ["table"],
)
TASK_DURATION = Histogram(
    "firn_task_duration_seconds",
    "Seconds a compaction task attempt ran, by table and outcome.",
    ["table", "outcome"],
    buckets=TASK_BUCKETS,
)
PUBLICATION_LAG = Histogram(
    "firn_publication_lag_seconds",
    "Per Iceberg publication: seconds from the oldest Firn commit it made visible to "
    "the moment the Iceberg table showed it (publisher).",
    ["table"],
    buckets=PUBLICATION_BUCKETS,
)
PUBLICATIONS = Counter(
    "firn_publications",
    "Calls to publish a table as an Iceberg table, by outcome (published, unchanged, "
    "disabled, busy, refused; deferred: an event that did not publish at once, left "
    "to the FIRN_PUBLISHER_GATHER wait or, the table having been published less than "
    "FIRN_PUBLISHER_MIN_INTERVAL ago, to the next sweep).",
    ["outcome"],
)
PUBLICATION_ERRORS = Counter(
    "firn_publication_errors",
    "Publications of one table that failed (the publisher records why for `firn status` "
    "and tries the table again), by error class; database outages are not counted here.",
    ["error"],
)
PUBLICATION_BYTES = Counter(
    "firn_publication_bytes",
    "Bytes of Iceberg metadata, manifests and position delete files publications wrote.",
    ["table"],
)
DEAD_LETTERS = Counter(
    "firn_dead_letters",
    "Messages parked in the dead-letter topic, by service and reason kind.",
    ["service", "reason"],
)
LOST_DEAD_LETTERS = Counter(
    "firn_lost_dead_letters",
    "Messages skipped because the broker refused even their dead letter.",
    ["service"],
)
CONSUMER_RENEWALS = Counter(
    "firn_kafka_consumer_renewals",
    "Kafka consumers a consume-loop service replaced because their group had no "
    "coordinator for too long.",
    ["service"],
)
CONSUMER_LAG = Gauge(
    "firn_kafka_consumer_lag",
    "Messages of an assigned topic partition the service's consumer has not read yet.",
    ["service", "topic", "partition"],
)
POSTGRES_ERRORS = Counter(
    "firn_postgres_errors",
    "Postgres errors a service caught (and retried, when transient), by error class.",
    ["error"],
)
POSTGRES_RECONNECTS = Counter(
    "firn_postgres_reconnects", "Catalog connections opened again after they broke."
)
