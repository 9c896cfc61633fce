"""What a reader needs to reach the published tables: pyiceberg catalog properties.

``firn iceberg properties --json`` prints ``catalog_properties``: a reader passes them
to ``pyiceberg.catalog.load_catalog(NAME, **properties)`` with NAME the catalog name
(``FIRN_ICEBERG_CATALOG``, ``firn`` unless set; the SQL catalog keeps it in every
row). The URI is SQLAlchemy's form of Firn's database URL with the psycopg2 driver
(``pyiceberg[sql-postgres]`` installs it) and Firn's schema on the search path.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict

from firn.io.storage import resolve_root
from firn.settings import FirnSettings

_URL_PARTS = ("user", "password", "host", "port", "dbname")


def sqlalchemy_url(settings: FirnSettings) -> str:
    """Firn's database as a SQLAlchemy URL for psycopg2, pinned to Firn's schema."""
    parts = {k: str(v) for k, v in conninfo_to_dict(settings.database_dsn()).items() if v}
    user = quote(parts.get("user", ""), safe="")
    password = parts.get("password")
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    host = parts.get("host", "")
    if "," in host or host.startswith("/"):  # several hosts or a socket: as a parameter
        netloc, extra = "", {"host": host}
    else:
        netloc, extra = (f"[{host}]" if ":" in host else host), {}
    if parts.get("port"):
        netloc += f":{parts['port']}"
    query = {k: v for k, v in parts.items() if k not in _URL_PARTS}
    query.update(extra)
    query["options"] = f"-csearch_path={settings.database_schema}"
    return f"postgresql+psycopg2://{auth}{netloc}/{quote(parts.get('dbname', ''), safe='')}?" + (
        urlencode(query)
    )


def catalog_properties(settings: FirnSettings) -> dict[str, str]:
    """pyiceberg's ``load_catalog`` properties for the catalog Firn publishes into."""
    warehouse = resolve_root(settings.warehouse)
    if "://" not in warehouse:
        warehouse = "file://" + warehouse
    return {
        "type": "sql",
        "uri": sqlalchemy_url(settings),
        "warehouse": warehouse.partition("?")[0],
        "init_catalog_tables": "false",
    }
