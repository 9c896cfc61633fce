"""What a worker process read from immutable files, kept for its next tasks: the key
columns of base files and deletion vectors.

At ten commits a second a unit folds every few hundred milliseconds, and each fold
looks its change keys up in the same base files (``firn.engine.vectors``) and reads
their vectors again: about a fifth of a fold task's time went to reading what the
previous fold had read. Data and vector files are never changed in place (every
output has a path of its own, a new vector is a new file), so what was read from one
is valid for as long as anyone can name it; an entry is keyed by the file's full path
with its size and row count, as the catalog recorded them, so a file that was
replaced under the same name would miss rather than hit.

Entries were checked like any read when they were first read (``firn.io.integrity``);
a file damaged on storage after that goes unnoticed by the cache's users until it is
read again (evicted, or another process).

A least-recently-used map bounded by the bytes of its values, one per purpose, shared
by the threads of the process (the dispatcher runs small batches on two). Spark
reuses its Python workers, so on a cluster each worker keeps its own.

The caches themselves live with their readers: ``firn.engine.vectors.BASE_KEYS`` and
``firn.io.deletion_vectors.VECTORS``.

Executor-safe: the standard library only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class FileCache(Generic[V]):
    """Values read from files, least recently used first out once their bytes pass
    ``capacity``; a value larger than a quarter of it is not kept (it would push out
    everything else for one file)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_read(self, key: Hashable, read: Callable[[], V], size: Callable[[V], int]) -> V:
        """The value kept for ``key``, else ``read()`` (kept if it fits). Reads
        happen outside the lock: two threads missing the same key both read it."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[0]
            self.misses += 1
        value = read()
        self._put(key, value, size(value))
        return value

    def _put(self, key: Hashable, value: V, nbytes: int) -> None:
        if nbytes * 4 > self.capacity:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.capacity:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
