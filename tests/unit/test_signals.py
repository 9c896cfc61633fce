"""``stop_on_signals``: a stop signal sets the event even when it lands while the main
thread holds the event's own lock, and the previous handlers come back after."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from firn.signals import stop_on_signals

# A process that holds the event's lock (as ``event.wait()`` does just before it parks
# and just after it wakes) when SIGINT arrives. A handler that set the event itself
# would wait for that lock in the thread that holds it, forever.
SIGNAL_UNDER_THE_LOCK = textwrap.dedent(
    """
    import os, signal, threading
    from firn.signals import stop_on_signals

    heard = []
    with stop_on_signals(threading.Event(), on_signal=heard.append) as stopping:
        with stopping._cond:  # the lock Event.wait and Event.set both take
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100_000))  # bytecodes: the Python-level handler runs here
        print("set" if stopping.wait(10) else "not set", heard)
    """
)


def test_a_signal_under_the_events_lock_still_stops() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_UNDER_THE_LOCK],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"set [{int(signal.SIGINT)}]"


def test_sigterm_sets_the_event_and_the_old_handlers_come_back() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    heard: list[int] = []
    with stop_on_signals(threading.Event(), on_signal=heard.append) as stopping:
        assert not stopping.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stopping.wait(10)
    assert heard == [signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before


def test_other_signals_are_left_alone() -> None:
    heard: list[int] = []
    with stop_on_signals(
        threading.Event(), signals=(signal.SIGTERM,), on_signal=heard.append
    ) as stopping:
        previous = signal.signal(signal.SIGUSR1, lambda *_: None)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)  # also written to the wakeup socket
            assert not stopping.wait(0.5)
        finally:
            signal.signal(signal.SIGUSR1, previous)
    assert heard == []


def test_firn_dashboard_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """``docker stop`` sends SIGTERM: the dashboard stops its server and exits 0, as on
    Ctrl-C (no page is asked for, so no catalog is opened)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRN_")}
    env |= {"FIRN_HOME": str(tmp_path), "FIRN_DATABASE_URL": "postgresql://u:p@127.0.0.1:1/x"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "firn", "dashboard", "--port", "0", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["url"].startswith("http://")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_outside_the_main_thread_it_refuses_and_changes_nothing() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    failures: list[BaseException] = []

    def enter() -> None:
        try:
            with stop_on_signals(threading.Event()):
                pass
        except ValueError as exc:
            failures.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join(10)
    assert len(failures) == 1
    assert {s: signal.getsignal(s) for s in before} == before
