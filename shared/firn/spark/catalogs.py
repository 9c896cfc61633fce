"""The catalogs a process plans Spark reads with, kept open from one read to the next.

A ``format("firn")`` read, ``firn.spark.read`` and the ``firn`` Python source each look
their table up in the catalog on the driver, once per query. Opening a catalog for that
took most of the planning: building the settings from the read's options and the
environment (about 11 ms: pydantic reads every ``FIRN_`` variable and ``.env``), then
connecting to Postgres and checking the schema's migrations (about 13 ms), against about
10 ms for the queries themselves. A dashboard's small reads paid it on every query. So a
catalog is borrowed for one planning step and given back, and the next read with the same
settings takes it.

- **Keyed by the read's catalog options and the process's ``FIRN_`` variables**: a
  catalog opened under other ones is never lent. A change to a ``.env`` file is seen by
  catalogs opened after it, not by those already kept.
- **One borrower at a time**: Py4J answers the JVM's planning calls on threads of its own,
  and reads planned at once each get a catalog (opened if none is idle). At most
  ``IDLE_MOST`` stay open between reads, whatever their settings; the one used longest
  ago is closed first.
- **A catalog whose connection died while idle** (Postgres restarted, an idle timeout)
  fails its first query, the table's lookup: it is closed and the lookup is made once
  more on a new one, so a read never fails for a connection it did not choose to keep.
- **Not across a fork**: a child process starts with none of its parent's catalogs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from firn.errors import ServiceError

if TYPE_CHECKING:
    from firn.api.catalog import Catalog
    from firn.api.table import Table

IDLE_MOST = 4
"""Catalogs kept open between reads, in all: past this, the one used longest ago is closed
(a process that reads from many catalogs, or a test suite's schema per test, holds no more
connections than this idle)."""

_Key = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]

_lock = threading.Lock()
_idle: list[tuple[_Key, Catalog]] = []
"""The kept catalogs, the one given back last at the end."""
_owner = os.getpid()


def _key(settings: Mapping[str, str]) -> _Key:
    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("FIRN_")))
    return tuple(sorted(settings.items())), environment


def _take(key: _Key) -> Catalog | None:
    global _owner
    with _lock:
        if _owner != os.getpid():
            # A forked child: the connections are its parent's, not to be used or closed.
            _idle.clear()
            _owner = os.getpid()
        for at in range(len(_idle) - 1, -1, -1):
            if _idle[at][0] == key:
                return _idle.pop(at)[1]
    return None


def _give_back(key: _Key, catalog: Catalog) -> None:
    closing = [catalog]
    with _lock:
        if _owner == os.getpid():
            _idle.append((key, catalog))
            closing = [c for _, c in _idle[: max(0, len(_idle) - IDLE_MOST)]]
            del _idle[: len(closing)]
    for old in closing:
        old.close()


def _open(settings: Mapping[str, str]) -> Catalog:
    from firn.api.catalog import connect
    from firn.settings import FirnSettings

    # No Kafka: a read announces nothing.
    chosen = FirnSettings(**settings).model_copy(update={"kafka_bootstrap": ""})  # type: ignore[arg-type]
    return connect(settings=chosen)


@contextlib.contextmanager
def table_for_read(settings: Mapping[str, str], name: str) -> Iterator[Table]:
    """Table ``name`` of the catalog ``settings`` (a read's catalog options) name, for
    one planning step: its catalog is a kept one when there is one, and is kept again
    after the step unless the step raised."""
    import psycopg  # here: executors import the reader, and with it this module, without it

    key = _key(settings)
    catalog = _take(key)
    table: Table | None = None
    if catalog is not None:
        try:
            table = catalog.table(name)
        except (psycopg.OperationalError, psycopg.InterfaceError, ServiceError):
            catalog.close()  # closed while it was idle: the lookup once more, anew
            catalog = None
        except BaseException:
            catalog.close()
            raise
    if catalog is None:
        catalog = _open(settings)
        try:
            table = catalog.table(name)
        except BaseException:
            catalog.close()
            raise
    assert table is not None
    try:
        yield table
    except BaseException:
        catalog.close()
        raise
    _give_back(key, catalog)


def close_kept() -> None:
    """Close every kept catalog (tests; a session that is done with Firn)."""
    with _lock:
        kept = [c for _, c in _idle] if _owner == os.getpid() else []
        _idle.clear()
    for catalog in kept:
        catalog.close()
