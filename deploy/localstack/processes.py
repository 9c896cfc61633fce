"""Child processes of the local stack: start, wait until ready, stop, never orphan.

Every child gets its own session so a Ctrl-C in the terminal reaches only the
supervisor, which then stops the children in order (services, Kafka, Postgres). On
Linux each child also asks the kernel for SIGTERM when its parent dies, so even a
``kill -9`` of the supervisor leaves no broker or server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from firn.errors import StackError

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.2
"""How often ``wait_until`` asks whether a process is ready."""


def _die_with_parent() -> None:
    """Runs in the child between fork and exec."""
    os.setsid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        try:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                user=user,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise StackError(f"cannot start {argv[0]}: {exc}") from exc


def stop(proc: subprocess.Popen[bytes], name: str, *, timeout: float = 20.0) -> None:
    """SIGTERM, wait, then SIGKILL: the process is gone when this returns."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop within %.0fs; killing it", name, timeout)
        proc.kill()
        proc.wait()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_until(
    ready: Callable[[], bool],
    *,
    what: str,
    proc: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float,
) -> None:
    """Poll ``ready`` until it holds; fail fast if ``proc`` exits first."""

    def check() -> bool:
        if proc.poll() is not None:
            raise StackError(
                f"{what} exited with code {proc.returncode} before it was ready;\n"
                f"last lines of {log_path}:\n{tail(log_path)}"
            )
        return ready()

    polling = Retrying(
        retry=retry_if_result(lambda answer: not answer),
        wait=wait_fixed(POLL_SECONDS),
        stop=stop_after_delay(timeout),
    )
    try:
        polling(check)
    except RetryError:
        raise StackError(
            f"{what} was not ready after {timeout:.0f}s;\n"
            f"last lines of {log_path}:\n{tail(log_path)}"
        ) from None


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def run(argv: Sequence[str], *, what: str, user: str | None = None, **kwargs: object) -> str:
    """Run a short command to completion; raise ``StackError`` with its output on failure."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            user=user,
            **kwargs,  # type: ignore[call-overload]
        )
    except OSError as exc:
        raise StackError(f"{what}: cannot run {argv[0]}: {exc}") from exc
    if done.returncode != 0:
        raise StackError(f"{what} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    out: str = done.stdout
    return out
