"""The service registry: which service processes are running and connected.

A process registers once at start, refreshes ``last_seen`` every heartbeat, and marks
itself stopped on a clean exit. A process killed without notice simply stops
refreshing; ``live_instances`` counts only recent heartbeats.
"""

from __future__ import annotations

import os
import socket
import uuid

from firn.postgres.connection import Connection


def register(conn: Connection, service: str) -> str:
    """Record this process as a running ``service``; return its instance id."""
    instance_id = f"{service}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with conn.transaction():
        conn.execute(
            "INSERT INTO service_instance (instance_id, service, host, pid) "
            "VALUES (%s, %s, %s, %s)",
            (instance_id, service, socket.gethostname(), os.getpid()),
        )
    return instance_id


def heartbeat(conn: Connection, instance_id: str) -> None:
    with conn.transaction():
        conn.execute(
            "UPDATE service_instance SET last_seen = now() WHERE instance_id = %s", (instance_id,)
        )


def deregister(conn: Connection, instance_id: str) -> None:
    with conn.transaction():
        conn.execute(
            "UPDATE service_instance SET stopped_at = now(), last_seen = now() "
            "WHERE instance_id = %s",
            (instance_id,),
        )


def live_instances(conn: Connection, *, within_seconds: float) -> dict[str, int]:
    """Running instances per service whose heartbeat is at most ``within_seconds`` old."""
    rows = conn.execute(
        "SELECT service, count(*) FROM service_instance "
        "WHERE stopped_at IS NULL AND last_seen > now() - make_interval(secs => %s) "
        "GROUP BY service",
        (within_seconds,),
    ).fetchall()
    return {service: count for service, count in rows}
