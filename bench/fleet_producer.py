"""The producers of bench/fleet.py: one process each, committing change sets to the
tables it owns through the public API and keeping a reference model of them.

A producer is the only writer of its tables (table index % producers), so applying
its own commits in the order it made them gives each table's merged view. Rows are
keyed by (p, id) with p derived from id (``p{id % partitions}``), so the id alone
names a row and the model is one ``id -> v`` dict per table; ``note`` is derived
from v (``note_of``), so it need not be kept either. The models travel back to the
main process as two packed int64 arrays per table.
"""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from array import array
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

import firn

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("p", pa.string(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("note", pa.string()),
    ]
)
PRIMARY_KEY = ("p", "id")
"""The partition column must be part of the key (a key never moves between
partitions); p is a function of id, so this is the id's identity all the same."""
PARTITION_BY = ("p",)

PROGRESS_EVERY = 1.0
"""Seconds between a producer's progress messages (its latencies so far)."""

MAX_ERROR_SAMPLES = 5

Model = dict[int, int]
"""One table's merged view as the producer knows it: id -> v."""


class Events(Protocol):
    """The part of a multiprocessing queue a producer uses."""

    def put(self, obj: Any, block: bool = ..., timeout: float | None = ...) -> None: ...


class Flag(Protocol):
    """The part of a multiprocessing event a producer uses."""

    def wait(self, timeout: float | None = ...) -> bool: ...


class Shared(Protocol):
    """A multiprocessing Value: the start time, as epoch seconds."""

    value: float


@dataclass(frozen=True)
class ProducerSpec:
    index: int
    tables: tuple[str, ...]
    rate: float
    """Commits per second of this producer (the fleet's rate / producers)."""
    duration: float
    batch: int
    keys: int
    partitions: int
    delete_ratio: float
    seed: int


def partition_of(key: int, partitions: int) -> str:
    return f"p{key % partitions}"


def note_of(v: int) -> str:
    return f"{v & 0xFFFFFFFF:08x}"


def make_changes(
    rng: random.Random, model: Model, spec: ProducerSpec
) -> tuple[pa.Table, list[tuple[int, int | None]]]:
    """One change set (``--batch`` rows, a ``--delete-ratio`` share of deletes of live
    ids, the rest upserts of uniform ids with a fresh v) and its operations in row
    order (v None: delete) for the model."""
    deletes = round(spec.batch * spec.delete_ratio) if model else 0
    live = list(model) if deletes else []
    ops: list[tuple[int, int | None]] = [(rng.choice(live), None) for _ in range(deletes)]
    ops += [(rng.randrange(spec.keys), rng.getrandbits(62)) for _ in range(spec.batch - deletes)]
    rng.shuffle(ops)  # deletes among the upserts: the commit applies rows in order
    changes = pa.table(
        {
            "id": [key for key, _ in ops],
            "p": [partition_of(key, spec.partitions) for key, _ in ops],
            "v": [v for _, v in ops],
            "note": [None if v is None else note_of(v) for _, v in ops],
            "_op": ["D" if v is None else "U" for _, v in ops],
        },
        schema=SCHEMA.append(pa.field("_op", pa.string(), nullable=False)),
    )
    return changes, ops


def apply(model: Model, ops: list[tuple[int, int | None]]) -> None:
    for key, v in ops:
        if v is None:
            model.pop(key, None)
        else:
            model[key] = v


def pack(model: Model) -> tuple[bytes, bytes]:
    """The model as sorted ids and their vs, 16 bytes a row through the pipe."""
    ids = sorted(model)
    return array("q", ids).tobytes(), array("q", (model[k] for k in ids)).tobytes()


def unpack(packed: tuple[bytes, bytes]) -> tuple[list[int], list[int]]:
    ids, vs = array("q"), array("q")
    ids.frombytes(packed[0])
    vs.frombytes(packed[1])
    return ids.tolist(), vs.tolist()


def run_producer(spec: ProducerSpec, start: Flag, start_at: Shared, events: Events) -> None:
    """Process entry: connect, say ready, wait for the common start, commit open-loop
    for ``duration`` seconds, send the result. Any failure is sent, not raised, so
    the main process never waits for a producer that died."""
    _exit_with_parent(os.getppid())
    try:
        _produce(spec, start, start_at, events)
    except BaseException:
        events.put(("failed", spec.index, traceback.format_exc()))


def _exit_with_parent(parent: int) -> None:
    """Exit once the bench that started this producer is gone (killed, or
    interrupted before it could stop its producers), instead of committing on, or
    retrying a stack that is gone, for good."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="fleet-parent-watch", daemon=True).start()


def _produce(spec: ProducerSpec, start: Flag, start_at: Shared, events: Events) -> None:
    with firn.connect() as catalog:
        # Handles up front: a lookup is a catalog query, not part of any commit.
        handles = [catalog.table(name) for name in spec.tables]
        events.put(("ready", spec.index))
        start.wait()
        models: list[Model] = [{} for _ in handles]
        result = _commit_loop(spec, handles, models, start_at.value, events)
        result["models"] = {
            name: pack(model) for name, model in zip(spec.tables, models, strict=True)
        }
        events.put(("done", spec.index, result))


def _commit_loop(
    spec: ProducerSpec, handles: list[Any], models: list[Model], start_at: float, events: Events
) -> dict[str, Any]:
    """Open loop: commit i is due at start + i / rate whatever the earlier ones took;
    a producer behind commits at once, and how far behind it got is the lag. It stops
    at ``duration`` on the clock, not after its schedule: a slow stack shows as a rate
    below the asked one, not as a longer run."""
    rng = random.Random(spec.seed)
    interval = 1.0 / spec.rate
    # The common start is wall-clock (it crosses processes); the schedule runs on
    # this process's perf_counter.
    began = time.perf_counter() + (start_at - time.time())
    cpu_began = time.process_time()
    latencies: list[float] = []
    commits, errors, behind = 0, 0, 0.0
    samples: list[str] = []
    phases: dict[str, list[float]] = {}
    last_report = began
    end = began + spec.duration
    while (due := began + commits * interval) < end and time.perf_counter() < end:
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        else:
            behind = max(behind, -wait)
        table = rng.randrange(len(handles))
        changes, ops = make_changes(rng, models[table], spec)
        t0 = time.perf_counter()
        try:
            committed = handles[table].commit(changes)
        except Exception as exc:
            # Not applied to the model: a commit whose outcome is unknown then shows
            # as a mismatch, which is what it is.
            errors += 1
            if len(samples) < MAX_ERROR_SAMPLES:
                samples.append(f"{spec.tables[table]}: {type(exc).__name__}: {exc}")
        else:
            apply(models[table], ops)
            for name, seconds in committed.phases.items():
                phases.setdefault(name, []).append(seconds)
        latencies.append(time.perf_counter() - t0)
        commits += 1
        if time.perf_counter() - last_report >= PROGRESS_EVERY:
            events.put(("progress", spec.index, latencies, behind, errors))
            latencies, last_report = [], time.perf_counter()
    return {
        "latencies": latencies,
        "commits": commits,
        "errors": errors,
        "error_samples": samples,
        "behind_max_s": behind,
        "seconds": time.perf_counter() - began,
        "cpu_s": time.process_time() - cpu_began,
        "phases": phases,
    }
