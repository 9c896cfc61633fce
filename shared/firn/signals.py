"""Stop signals turned into a ``threading.Event`` without a lock in the handler.

A Python signal handler runs in the main thread between two bytecodes, wherever that
thread happens to be. Setting an ``Event`` there takes the event's lock; if the main
thread was itself inside ``event.wait()`` at a point where it holds that lock (just
before it parks, or just after it wakes), the handler waits for a lock its own thread
holds, and the process hangs until it is killed: ``firn up`` once sat through a
Ctrl-C that way.

So the handler does nothing in Python. The interpreter's C-level handler writes the
signal's number to a socket (``signal.set_wakeup_fd``), and a watcher thread reading
that socket sets the event from an ordinary thread, where taking a lock is safe.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Protocol, TypeVar

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(
    event: threading.Event,
    *,
    signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
    on_signal: Callable[[int], None] = lambda _signum: None,
) -> Iterator[threading.Event]:
    """Within the block, each of ``signals`` calls ``on_signal`` with its number and
    then sets ``event``, both from a watcher thread; the previous handlers and wakeup
    descriptor come back on exit. Only the main thread may install signal handlers."""
    reader, writer = socket.socketpair()
    try:
        writer.setblocking(False)
        # Raises ValueError outside the main thread, before anything is changed.
        previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except BaseException:
        reader.close()
        writer.close()
        raise
    wanted = {int(s) for s in signals}
    previous_handlers: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def watch() -> None:
        while True:
            try:
                numbers = reader.recv(64)
            except OSError:
                return
            if not numbers:  # the writer closed: the block is over
                return
            for number in numbers:
                if number in wanted:
                    on_signal(number)
                    event.set()

    watcher = threading.Thread(target=watch, name="firn-signals", daemon=True)
    watcher.start()
    try:
        for number in wanted:
            previous_handlers[number] = signal.signal(number, _noted)
        yield event
    finally:
        for number, handler in previous_handlers.items():
            signal.signal(number, handler)
        signal.set_wakeup_fd(previous_fd)
        writer.close()
        watcher.join(timeout=5)
        reader.close()


def _noted(_signum: int, _frame: FrameType | None) -> None:
    """The Python-level handler: nothing, on purpose; the wakeup socket carries the
    signal to the watcher. (A handler must be installed: with the default one, SIGINT
    raises KeyboardInterrupt and SIGTERM ends the process.)"""


class Stoppable(Protocol):
    def stop(self) -> None: ...


Server = TypeVar("Server", bound=Stoppable)


def serve_until_stopped(start: Callable[[], Server], announce: Callable[[Server], None]) -> None:
    """Start a server, announce it, and stop it on Ctrl-C or SIGTERM. The signals are
    taken before the announcement: a caller may stop it as soon as it reads the
    address."""
    with stop_on_signals(threading.Event()) as stopping:
        server = start()
        try:
            announce(server)
            stopping.wait()
        finally:
            server.stop()
