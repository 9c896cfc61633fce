"""Wiring of the executor-dispatcher: consumes firn.plan-tasks, owns the SparkSession.

The session is long-lived (built once here) so tasks never pay Spark's start-up.
Claiming and executing tasks arrive with the compaction engine; until then the
dispatcher starts, connects to Kafka, Postgres and Spark, and parks unhandled events.
"""

from __future__ import annotations

import logging

from firn.settings import FirnSettings
from firn.spark import spark_session
from firn_services.runtime import prepare, run_consumer_service

NAME = "dispatcher"
log = logging.getLogger(__name__)


def main(settings: FirnSettings) -> None:
    # Spark first: the dispatcher registers as connected only once it can run work.
    spark = spark_session(settings, app_name=f"firn-{NAME}")
    log.info("Spark %s session ready on %s", spark.version, settings.spark_master)
    context = prepare(NAME, settings)
    try:
        run_consumer_service(context, consumes=[context.topics.plan_tasks], handlers={})
    finally:
        spark.stop()
