"""Wiring of the executor-dispatcher: consumes firn.plan-tasks, owns the SparkSession,
produces firn.task-results; sweeps expired leases and unannounced Pending tasks.

The session is long-lived (built once here) so tasks never pay Spark's start-up.
"""

from __future__ import annotations

import contextlib
import functools
import logging

from firn.engine.execution import Runner, run_local, run_small_here, run_spark
from firn.engine.spark_session import spark_session
from firn.engine.worker_pool import WorkerPool
from firn.kafka import producer
from firn.settings import FirnSettings
from firn_services.dispatcher.handlers import Dispatcher
from firn_services.runtime import open_catalog, prepare, run_consumer_service

NAME = "dispatcher"
log = logging.getLogger(__name__)


def main(settings: FirnSettings) -> None:
    # Spark first: the dispatcher registers as connected only once it can run work.
    spark = spark_session(settings, app_name=f"firn-{NAME}")
    log.info("Spark %s session ready on %s", spark.version, settings.spark_master)
    context = prepare(NAME, settings)
    local: Runner = (
        WorkerPool(settings.dispatcher_local_processes, settings.dispatcher_local_nice)
        if settings.dispatcher_local_processes
        else functools.partial(run_local, threads=settings.dispatcher_local_threads)
    )
    try:
        with open_catalog(NAME, settings) as catalog:
            dispatcher = Dispatcher(
                catalog,
                producer(settings),
                context.topics,
                run_small_here(
                    functools.partial(run_spark, spark), settings.dispatcher_local_bytes, local
                ),
                owner=context.instance_id,
            )
            with contextlib.closing(dispatcher):
                run_consumer_service(
                    context,
                    consumes=[context.topics.plan_tasks],
                    handlers={"plan-task": dispatcher.plan_task},
                    on_idle=dispatcher.sweep,
                )
    finally:
        if isinstance(local, WorkerPool):
            local.close()
        spark.stop()
