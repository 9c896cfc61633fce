"""Merge worker processes: the dispatcher's small batches (``run_small_here``) run on
them, one task per process at a time, instead of on threads of its own process.

Threads do not pay for small merges: a fold of a few hundred KB is a string of
pyarrow and numpy calls each too short to release the GIL for long, so two threads
took as long as one (replayed folds of a skewed run: 12.7 and 12.0-12.7 ms a task),
where two processes took 8.5 ms a task, pickling included.

Each worker is an executor of one process, started once (spawned: the dispatcher
holds a JVM and threads a fork would copy half of). A task goes to the worker its
node hashes to, unless that worker already has more of the batch than another: a
node's next fold then finds its base keys and vectors in that worker's caches
(``firn.io.file_cache``). A worker that dies (killed, out of memory) fails its tasks
with a retryable error and is started again for the next batch; a worker whose
dispatcher died exits within a second. As with any spawned process, a script that
builds a pool must guard its main (``if __name__ == "__main__":``); the dispatcher
runs as ``python -m firn``, whose ``__main__`` a spawned process does not run again.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from firn.engine.execution import Claim, run_reporting
from firn.engine.kernel import KernelLimits
from firn.model.schema import TableSchema
from firn.model.tasks import TaskResult, TaskSpec

log = logging.getLogger(__name__)


PARENT_CHECK_SECONDS = 1.0


def _start_worker(parent: int, nice: int) -> None:
    """Each worker's initializer: lower its scheduling priority by ``nice``, and exit
    once the dispatcher that started it is gone (a dispatcher that is killed cannot
    shut its workers down, and a worker waits for work forever).

    A merge is background work: on a machine shared with producers and the catalog,
    a wave of folds at the same priority takes the cores from the commits in flight
    and their latency follows (``bench/fleet.py``). Niced, the merges take what the
    write path leaves; they still get all of an idle machine."""
    if nice:
        os.nice(nice)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="firn-parent-watch", daemon=True).start()


def _ready() -> bool:
    """Submitted to each new worker to start its process at once: its initializer
    imports this module, and so the kernel, before the first task needs them."""
    return True


class WorkerPool:
    """A ``Runner`` on ``processes`` worker processes (see the module doc)."""

    def __init__(self, processes: int, nice: int = 0) -> None:
        if processes < 1:
            raise ValueError(f"a worker pool needs at least one process, got {processes}")
        if not 0 <= nice <= 19:
            raise ValueError(f"a worker's niceness is 0 to 19, got {nice}")
        self._nice = nice
        self._context = multiprocessing.get_context("spawn")
        self._workers = [self._start() for _ in range(processes)]
        self._replacing = threading.Lock()  # the dispatcher runs several tables at once

    def _start(self) -> ProcessPoolExecutor:
        worker = ProcessPoolExecutor(
            1,
            mp_context=self._context,
            initializer=_start_worker,
            initargs=(os.getpid(), self._nice),
        )
        worker.submit(_ready)  # starts the process now, not at the first batch
        return worker

    def __call__(
        self, table: TableSchema, claims: Sequence[Claim], limits: KernelLimits
    ) -> list[TaskResult]:
        """Run ``claims`` at once, each task on its node's worker where it can; the
        results in claim order."""
        load = [0] * len(self._workers)
        sent: list[tuple[int, ProcessPoolExecutor, Claim, Future[TaskResult]]] = []
        for spec, attempt in claims:
            n = self._worker_for(spec, load)
            load[n] += 1
            worker, future = self._submit(n, table, limits, spec, attempt)
            sent.append((n, worker, (spec, attempt), future))
        results = []
        for n, worker, (spec, attempt), future in sent:
            try:
                results.append(future.result())
            except BrokenProcessPool as exc:
                log.warning("merge worker %d died running task %s: %r", n, spec.task_id, exc)
                self._replace(n, worker)
                results.append(
                    TaskResult(
                        task_id=spec.task_id,
                        attempt=attempt,
                        error=f"the merge worker process died: {exc!r}",
                        retryable=True,
                    )
                )
        return results

    def _worker_for(self, spec: TaskSpec, load: list[int]) -> int:
        home = hash((spec.table_id, spec.partition_key, spec.node_m, spec.node_i)) % len(load)
        least = min(range(len(load)), key=load.__getitem__)
        return home if load[home] <= load[least] else least

    def _submit(
        self, n: int, table: TableSchema, limits: KernelLimits, spec: TaskSpec, attempt: int
    ) -> tuple[ProcessPoolExecutor, Future[TaskResult]]:
        worker = self._workers[n]
        try:
            return worker, worker.submit(run_reporting, table, limits, spec, attempt)
        except BrokenProcessPool:  # it died after its last batch: start it again
            worker = self._replace(n, worker)
            return worker, worker.submit(run_reporting, table, limits, spec, attempt)

    def _replace(self, n: int, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        """Worker ``n``, started again if it still is ``broken`` (once, however many of
        the batch's tasks it failed)."""
        with self._replacing:
            if self._workers[n] is broken:
                broken.shutdown(wait=False, cancel_futures=True)
                self._workers[n] = self._start()
            return self._workers[n]

    def close(self) -> None:
        for worker in self._workers:
            worker.shutdown(wait=True, cancel_futures=True)
