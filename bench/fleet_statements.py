"""The catalog's load by statement and by role while a fleet produces (``fleet.py
--statements``): which statements and which service's login cost Postgres its core.

The local Postgres loads pg_stat_statements when ``FIRN_POSTGRES_STATEMENTS=1``
(``firn_localstack.postgres``); the statements inside the catalog's functions are
counted too (``pg_stat_statements.track=all``), so a function's time shows both as
its own call and as its parts.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

TOP = 300
"""Statements kept in the report, dearest first."""

PER_ROLE = 8
"""Statements printed per role."""


def start(conn: Connection) -> None:
    """Count from now: the tables' creation is not the fleet's load."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    conn.execute("SELECT pg_stat_statements_reset()")
    conn.execute("SELECT pg_stat_reset()")


def read(conn: Connection, seconds: float) -> dict[str, Any]:
    """Milliseconds of execution per second of producing, by role (top-level
    statements only, so nothing is counted twice) and by statement, and the catalog
    functions' own time."""
    per_s = 1.0 / max(seconds, 1e-9)
    roles = conn.execute(
        "SELECT r.rolname, sum(s.calls), sum(s.total_exec_time) "
        "FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid "
        "WHERE s.toplevel GROUP BY r.rolname ORDER BY 3 DESC"
    ).fetchall()
    top = conn.execute(
        "SELECT r.rolname, s.toplevel, s.calls, s.total_exec_time, s.rows, "
        "left(regexp_replace(s.query, '\\s+', ' ', 'g'), 160) "
        "FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid "
        "ORDER BY s.total_exec_time DESC LIMIT %s",
        (TOP,),
    ).fetchall()
    # LLVM compiling a statement whose estimated cost passes jit_above_cost: tens of
    # milliseconds of CPU for one execution, which an OLTP catalog cannot afford.
    jit = conn.execute(
        "SELECT coalesce(sum(jit_functions), 0), coalesce(sum(jit_generation_time "
        "+ jit_inlining_time + jit_optimization_time + jit_emission_time), 0), "
        "count(*) FILTER (WHERE jit_functions > 0) FROM pg_stat_statements"
    ).fetchone()
    assert jit is not None
    functions = conn.execute(
        "SELECT funcname, calls, self_time, total_time FROM pg_stat_user_functions "
        "ORDER BY total_time DESC LIMIT %s",
        (TOP,),
    ).fetchall()
    return {
        "seconds": round(seconds, 1),
        "jit": {
            "functions": int(jit[0]),
            "ms_per_s": round(float(jit[1]) * per_s, 2),
            "statements": int(jit[2]),
        },
        "by_role": [
            {
                "role": role,
                "calls_per_s": round(int(calls) * per_s, 1),
                "ms_per_s": round(ms * per_s, 1),
            }
            for role, calls, ms in roles
        ],
        "top": [
            {
                "role": role,
                "toplevel": toplevel,
                "calls_per_s": round(calls * per_s, 1),
                "ms_per_s": round(ms * per_s, 2),
                "mean_ms": round(ms / max(calls, 1), 3),
                "rows_per_call": round(rows / max(calls, 1), 1),
                "query": query,
            }
            for role, toplevel, calls, ms, rows, query in top
        ],
        "functions": [
            {
                "function": name,
                "calls_per_s": round(calls * per_s, 1),
                "self_ms_per_s": round(self_ms * per_s, 2),
                "total_ms_per_s": round(total_ms * per_s, 2),
            }
            for name, calls, self_ms, total_ms in functions
        ],
    }


def lines(found: dict[str, Any]) -> list[str]:
    """The report for a reader: roles, then the dearest statements."""
    jit = found["jit"]
    out = [
        f"catalog JIT: {jit['ms_per_s']} ms/s compiling {jit['functions']} functions "
        f"for {jit['statements']} statements",
        "catalog load while producing (ms of execution per second):",
    ]
    out += [
        f"  {r['role']:<28} {r['ms_per_s']:8.1f} ms/s  {r['calls_per_s']:8.1f} calls/s"
        for r in found["by_role"]
    ]
    for role in [r["role"] for r in found["by_role"]]:
        out.append(f"dearest statements of {role}:")
        out += [
            f"  {s['ms_per_s']:7.2f} ms/s {s['calls_per_s']:7.1f}/s {s['mean_ms']:7.3f} ms "
            f"{'' if s['toplevel'] else '(nested) '}{s['query']}"
            for s in [s for s in found["top"] if s["role"] == role][:PER_ROLE]
        ]
    return out
