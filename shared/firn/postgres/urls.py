"""Database URLs for another role: the catalog's address with a producer's (or a
service's) user and password in place of the admin's."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict

from firn.errors import ConfigError


def url_as(dsn: str, user: str, password: str | None) -> str:
    """``dsn`` (a URL or ``key=value`` conninfo, one host or several) as a
    ``postgresql://`` URL that logs in as ``user``; the admin's own password, service
    file and passfile are dropped, every other parameter (``sslmode``,
    ``target_session_attrs``, ...) is kept."""
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    except Exception as exc:  # psycopg raises ProgrammingError for a malformed string
        raise ConfigError(
            f"the catalog's database URL cannot be read: {type(exc).__name__}"
        ) from exc
    for dropped in ("user", "password", "passfile", "service"):
        params.pop(dropped, None)
    hosts = params.pop("host", "").split(",") if params.get("host") else []
    ports = params.pop("port", "").split(",") if params.get("port") else []
    dbname = params.pop("dbname", "")
    if len(ports) == 1 and len(hosts) > 1:
        ports = ports * len(hosts)
    net, sockets = [], []
    for i, host in enumerate(hosts):
        if host.startswith("/"):
            sockets.append(host)
            continue
        port = ports[i] if i < len(ports) else ""
        shown = f"[{host}]" if ":" in host else host
        net.append(f"{shown}:{port}" if port else shown)
    if sockets:
        params["host"] = ",".join(sockets)
    login = quote(user, safe="")
    if password is not None:
        login += ":" + quote(password, safe="")
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{login}@{','.join(net)}/{quote(dbname, safe='')}{query}"


def masked(dsn: str) -> str:
    """``dsn`` with its password shown as ``***``, for logs and people."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # unreadable: show nothing of it rather than a secret
        return "<unreadable database URL>"
    if not params.get("password"):
        return dsn
    return url_as(dsn, str(params.get("user") or ""), "***").replace("%2A%2A%2A", "***")
