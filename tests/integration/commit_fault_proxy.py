"""A TCP proxy in front of the real Postgres that loses a connection at a commit point.

It relays the wire protocol message by message. Once armed, after the client sent a
message containing ``after`` (e.g. the statement registering a commit's files), the
commit point is where the connection breaks: the next ``COMMIT`` inside an explicit
transaction (``BEGIN``), or, for a statement outside one (its own transaction on an
autocommit connection), the statement itself, up to its ``Sync``. In one of two ways:

- ``"lost"``: the COMMIT (or the statement) is never delivered; the server sees the
  connection close and rolls back whatever it had;
- ``"landed"``: it is delivered and the server's answer read to the end
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
_BEGIN = b"Q" + struct.pack("!i", 10) + b"BEGIN\x00"
_SYNC = b"S" + struct.pack("!i", 4)


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

    def _take(self, message: bytes, state: _Relay) -> Fault | None:
        """The fault to inject now that the client sent ``message`` (None: relay it)."""
        with self._lock:
            if message == _BEGIN:
                state.in_transaction = True
            if self._fault is None:
                return None
            if not state.seen_after and self._after in message:
                state.seen_after = True
                state.autocommit = not state.in_transaction
            point = _SYNC if state.autocommit else _COMMIT
            if state.seen_after and message == point:
                fault, self._fault = self._fault, None
                return fault
            return None

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
        reads the server's answer. A statement outside a transaction is held from its
        ``after`` message to its Sync: a lost one never reaches the server."""
        with selectors.DefaultSelector() as selector, client, server:
            selector.register(client, selectors.EVENT_READ)
            selector.register(server, selectors.EVENT_READ)
            pending, started, state = b"", False, _Relay()
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
                            fault = self._take(message, state)
                            if fault is not None:
                                self._break(fault, server, state.held + message)
                                return
                            if message in (_COMMIT, b"Q" + struct.pack("!i", 13) + b"ROLLBACK\x00"):
                                state.in_transaction = False
                            if state.seen_after and state.autocommit:
                                state.held += message
                            else:
                                server.sendall(message)
            except OSError:
                return

    def _break(self, fault: Fault, server: socket.socket, commit: bytes) -> None:
        if fault == "landed":
            server.sendall(commit)
            while True:  # read the answer to its end: the commit is durable
                kind = _read_exact(server, 1)
                (length,) = struct.unpack("!i", _read_exact(server, 4))
                _read_exact(server, length - 4)
                if kind == b"Z":
                    break
        self.tripped.set()


class _Relay:
    """What one relayed connection has seen."""

    def __init__(self) -> None:
        self.in_transaction = False
        self.seen_after = False
        self.autocommit = False
        """Whether the armed statement runs outside an explicit transaction."""
        self.held = b""
        """Messages of that statement not relayed yet."""


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
