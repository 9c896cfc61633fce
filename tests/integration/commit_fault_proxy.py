"""A TCP proxy in front of the real Postgres that loses a connection at COMMIT.

It relays the wire protocol message by message. Once armed, after the client sent a
message containing ``after`` (e.g. the INSERT of a commit's files), the next
``COMMIT`` is where the connection breaks, in one of two ways:

- ``"lost"``: the COMMIT is never delivered; the server sees the connection close
  inside the transaction and rolls it back;
- ``"landed"``: the COMMIT is delivered and the server's answer read to the end
  (ReadyForQuery), so the commit is durable, then dropped.

Either way the client sees its connection break while committing and cannot tell
which happened: the unknown outcome of design §3, produced against the real server.
Connect through it with ``sslmode=disable``, so the first message is the startup.
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

Fault = Literal["lost", "landed"]
_COMMIT = b"Q" + struct.pack("!i", 11) + b"COMMIT\x00"


class CommitFaultProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._fault: Fault | None = None
        self._after = b""
        self.tripped = threading.Event()

    def arm(self, fault: Fault, after: bytes) -> None:
        with self._lock:
            self._fault, self._after = fault, after

    def _take(self, message: bytes, seen_after: bool) -> tuple[Fault | None, bool]:
        """(the fault to inject now, whether ``after`` has been seen)."""
        with self._lock:
            if self._fault is None:
                return None, False
            seen_after = seen_after or self._after in message
            if seen_after and message == _COMMIT:
                fault, self._fault = self._fault, None
                return fault, False
            return None, seen_after

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        """Relay both ways in one thread, so when the fault strikes nothing else
        reads the server's answer."""
        with selectors.DefaultSelector() as selector, client, server:
            selector.register(client, selectors.EVENT_READ)
            selector.register(server, selectors.EVENT_READ)
            pending, started, seen_after = b"", False, False
            try:
                while True:
                    for key, _ in selector.select():
                        chunk = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not chunk:
                            return
                        if key.fileobj is server:
                            client.sendall(chunk)
                            continue
                        pending += chunk
                        while (message := _next_message(pending, started)) is not None:
                            pending = pending[len(message) :]
                            started = True
                            fault, seen_after = self._take(message, seen_after)
                            if fault is not None:
                                self._break(fault, server)
                                return
                            server.sendall(message)
            except OSError:
                return

    def _break(self, fault: Fault, server: socket.socket) -> None:
        if fault == "landed":
            server.sendall(_COMMIT)
            while True:  # read the answer to its end: the commit is durable
                kind = _read_exact(server, 1)
                (length,) = struct.unpack("!i", _read_exact(server, 4))
                _read_exact(server, length - 4)
                if kind == b"Z":
                    break
        self.tripped.set()


def _next_message(data: bytes, started: bool) -> bytes | None:
    """The first whole message in ``data``; the startup message has no type byte."""
    head = 0 if not started else 1
    if len(data) < head + 4:
        return None
    (length,) = struct.unpack("!i", data[head : head + 4])
    end = head + length
    return data[:end] if len(data) >= end else None


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


@contextmanager
def commit_fault_proxy(upstream: tuple[str, int]) -> Iterator[CommitFaultProxy]:
    proxy = CommitFaultProxy(upstream)
    threading.Thread(target=proxy._accept, daemon=True).start()
    try:
        yield proxy
    finally:
        proxy._listener.close()
