"""``firn up`` and ``firn down``: the local stack and the five services, as one unit.

With ``--demo`` a synthetic producer (``demo.py``) runs in a thread of ``firn up``
while the main thread keeps supervising the services; the stack stops once the demo
has printed its summary, whether it ended by itself (``--duration``) or was stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import asdict
from typing import Any, TypeGuard

import psutil

from firn.commands.compact import request_compaction
from firn.dashboard import DashboardServer, serve
from firn.errors import ConfigError, StackError
from firn.postgres.urls import masked
from firn.settings import FirnSettings
from firn.signals import stop_on_signals

from .demo import DemoOptions
from .demo_run import run_demo
from .kafka import KAFKA_VERSION
from .logins import service_environments
from .stack import LocalStack, read_state
from .supervisor import SERVICES, ServiceProcesses

log = logging.getLogger(__name__)

DEMO_CHECK_INTERVAL = 10.0
"""FIRN_METRICS_CHECK_INTERVAL for the services of a demo, unless set: the periodic
catalog check is what triggers age-based compactions, and a demo should show them."""


def up(
    settings: FirnSettings,
    *,
    services: bool = True,
    as_json: bool = False,
    demo: dict[str, Any] | None = None,
    secure_kafka: bool = False,
) -> int:
    """Start everything, report it, and keep it running until SIGINT or SIGTERM; with
    ``demo`` (``DemoOptions`` fields), also run the demo producer, and stop when it
    ends; with ``secure_kafka`` the broker takes SASL over TLS only and every process
    logs in to it as its own principal. Returns the exit status: 1 if the demo's
    table did not match its model."""
    options = None if demo is None else DemoOptions(**demo)
    if options is not None and not services:
        raise ConfigError("--demo needs the services; drop --no-services")
    if secure_kafka and settings.kafka_bootstrap:
        raise ConfigError(
            "--secure-kafka secures the broker firn up starts, but FIRN_KAFKA_BOOTSTRAP "
            "names another; prepare that one with `firn kafka-acls --users` instead"
        )
    existing = read_state(settings.home)
    if existing is not None and _alive(existing.get("supervisor_pid")):
        raise StackError(
            f"a stack is already running from {settings.home} "
            f"(pid {existing['supervisor_pid']}); stop it with `firn down`"
        )
    with stop_on_signals(threading.Event()) as stopping:
        return _run_stack(settings, services, as_json, options, secure_kafka, stopping)


def _run_stack(
    settings: FirnSettings,
    services: bool,
    as_json: bool,
    options: DemoOptions | None,
    secure_kafka: bool,
    stopping: threading.Event,
) -> int:
    """``up`` once the stop signals set ``stopping``."""
    began = time.monotonic()
    url = settings.database_url.get_secret_value() if settings.database_url else None
    stack = LocalStack(
        home=settings.home,
        kafka_port=settings.kafka_port,
        postgres_port=settings.postgres_port,
        database_url=url,
        kafka_bootstrap=settings.kafka_bootstrap,
        secure_kafka=secure_kafka,
    )
    procs: ServiceProcesses | None = None
    dashboard: DashboardServer | None = None
    demo_thread: threading.Thread | None = None
    outcome: dict[str, Any] = {"code": 0}
    try:
        stack.start()
        dashboard = _start_dashboard(stack.apply_to(settings, role="operator"))
        env = {**os.environ, **stack.environment()}
        if options is not None and "metrics_check_interval" not in settings.model_fields_set:
            env["FIRN_METRICS_CHECK_INTERVAL"] = f"{DEMO_CHECK_INTERVAL:g}"
        connected_after = 0.0
        if services:
            catalog = service_environments(stack.apply_to(settings), SERVICES)
            own = {name: {**catalog[name], **stack.login(name)} for name in SERVICES}
            procs = ServiceProcesses(env, settings.home / "logs", own=own)
            procs.start()
            stack.write_state(supervisor=os.getpid(), services=procs.pids)
            connected_after = procs.wait_connected(stack.apply_to(settings))
            stack.write_state(supervisor=os.getpid(), services=procs.pids)
        report = {
            "status": "up",
            "home": str(settings.home),
            "database_url": stack.database_url,
            "kafka_bootstrap": stack.kafka_bootstrap,
            "kafka_version": KAFKA_VERSION,
            "kafka_logins": {
                role: str(settings.home / "kafka" / f"{role}.env") for role in stack.kafka_logins
            },
            "services": procs.pids if procs else {},
            "metrics": metrics_urls(settings) if procs else {},
            "dashboard": None if dashboard is None else dashboard.url,
            "seconds": {
                **{k: round(v, 2) for k, v in stack.timings.items()},
                "services_connected": round(connected_after, 2),
                "total": round(time.monotonic() - began, 2),
            },
        }
        if options is not None:
            report["demo"] = asdict(options)
        _print(report, as_json, _describe_up)
        if options is not None and procs is not None:
            demo_thread = _start_demo(
                stack.apply_to(settings), options, stopping, stack, procs, as_json, outcome
            )
        while not stopping.wait(1.0):
            if procs is not None and procs.restart_exited():
                stack.write_state(supervisor=os.getpid(), services=procs.pids)
    finally:
        if demo_thread is not None:
            # The summary reads the catalog and the services' /proc: keep them up.
            stopping.set()
            demo_thread.join()
        if procs is not None:
            procs.stop()
        if dashboard is not None:
            dashboard.stop()
        stack.stop()
    _print({"status": "down"}, as_json, lambda _: "firn: stack stopped")
    if "error" in outcome:
        raise outcome["error"]
    code: int = outcome["code"]
    return code


def _start_dashboard(settings: FirnSettings) -> DashboardServer | None:
    """The web dashboard in a thread of ``firn up``; none when its port is 0 or taken."""
    if not settings.dashboard_port:
        return None
    try:
        return serve(settings, request_compaction)
    except OSError as exc:
        # As with a service's /metrics port: the stack is worth more than its dashboard.
        log.error(
            "no dashboard: cannot listen on %s:%s (%s); set FIRN_DASHBOARD_PORT to a free "
            "port, or 0 for none",
            settings.dashboard_host,
            settings.dashboard_port,
            exc,
        )
        return None


def _start_demo(
    settings: FirnSettings,
    options: DemoOptions,
    stopping: threading.Event,
    stack: LocalStack,
    procs: ServiceProcesses,
    as_json: bool,
    outcome: dict[str, Any],
) -> threading.Thread:
    """Run the demo in a thread; when it ends, for whatever reason, the stack stops."""

    def pids() -> dict[str, int]:
        infrastructure = {"postgres": stack.postgres, "kafka": stack.kafka}
        started = {name: s.pid for name, s in infrastructure.items() if s and s.pid}
        return {**procs.pids, **started}

    def main() -> None:
        try:
            outcome["code"] = run_demo(settings, options, stopping, pids, as_json=as_json)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            stopping.set()

    thread = threading.Thread(target=main, name="firn-demo", daemon=True)
    thread.start()
    return thread


def down(settings: FirnSettings, *, as_json: bool = False, timeout: float = 90.0) -> int:
    """Stop the stack that ``firn up`` runs from ``settings.home``; kill leftovers."""
    state = read_state(settings.home)
    if state is None:
        _print({"status": "not running"}, as_json, lambda _: "firn: no stack is running")
        return 0
    supervisor = state.get("supervisor_pid")
    if _alive(supervisor):
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.2)
    leftovers = [pid for pid in state.get("pids", {}).values() if _alive(pid)]
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):  # it ended since we looked
            os.kill(pid, signal.SIGKILL)
    (settings.home / "stack.json").unlink(missing_ok=True)
    _print(
        {"status": "down", "killed_leftovers": leftovers},
        as_json,
        lambda r: (
            "firn: stack stopped"
            + (f" (killed {r['killed_leftovers']})" if r["killed_leftovers"] else "")
        ),
    )
    return 0


def _alive(pid: Any) -> TypeGuard[int]:
    """Whether ``pid`` (as read from the state file) is a running, non-zombie process."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        # A zombie child is still listed; it is not running.
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # someone else's process: it exists
        return True


def metrics_urls(settings: FirnSettings) -> dict[str, str]:
    """Each service's Prometheus endpoint as a URL to open on this host; services
    whose port is 0 serve none and are left out."""
    host = settings.prometheus_host
    if host in ("0.0.0.0", "::", ""):  # every interface: this host answers too
        host = "127.0.0.1"
    return {
        name: f"http://{host}:{port}/metrics"
        for name in SERVICES
        if (port := settings.prometheus_port(name))
    }


def _describe_up(report: dict[str, Any]) -> str:
    lines = [
        f"firn: stack is up (home {report['home']}, {report['seconds']['total']}s)",
        f"  postgres   {masked(report['database_url'])} (in full in {report['home']}/stack.json)",
        f"  kafka      {report['kafka_bootstrap']} (Apache Kafka {report['kafka_version']})",
    ]
    logins = report.get("kafka_logins", {})
    if logins:
        lines.append(
            "  kafka      SASL_SSL with ACLs: a producer logs in with the variables in "
            f"{logins['producer']} (`set -a; . {logins['producer']}; set +a`)"
        )
    metrics = report.get("metrics", {})
    for name, pid in report["services"].items():
        where = f", metrics {metrics[name]}" if name in metrics else ""
        lines.append(f"  {name:<10} pid {pid}, connected{where}")
    if report.get("dashboard"):
        lines.append(f"  dashboard  {report['dashboard']}")
    lines.append("Press Ctrl-C (or run `firn down`) to stop everything.")
    return "\n".join(lines)


def _print(report: dict[str, Any], as_json: bool, describe: Any) -> None:
    print(json.dumps(report) if as_json else describe(report), flush=True)


__all__ = ["SERVICES", "down", "up"]
