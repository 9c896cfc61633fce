"""What a reader needs to reach the published tables: pyiceberg catalog properties.

``firn iceberg properties --json`` prints ``catalog_properties``: a reader passes them
to ``pyiceberg.catalog.load_catalog(NAME, **properties)`` with NAME the catalog name
(``FIRN_ICEBERG_CATALOG``, ``firn`` unless set; the SQL catalog keeps it in every
row). The URI is SQLAlchemy's form of Firn's database URL with the psycopg2 driver
(``pyiceberg[sql-postgres]`` installs it) and Firn's schema on the search path.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode

from psycopg.conninfo import conninfo_to_dict
from pyiceberg.io import (
    S3_ACCESS_KEY_ID,
    S3_ANONYMOUS,
    S3_ENDPOINT,
    S3_REGION,
    S3_SECRET_ACCESS_KEY,
    S3_SESSION_TOKEN,
)

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


def io_properties(settings: FirnSettings) -> dict[str, str]:
    """pyiceberg FileIO properties for the warehouse (``file_io_properties``)."""
    return file_io_properties(settings.warehouse)


def file_io_properties(warehouse: str) -> dict[str, str]:
    """pyiceberg FileIO properties for an ``s3://`` warehouse whose ``pyarrow.fs``
    options ride in its query (``?region=...&endpoint_override=...&scheme=http``): the
    publisher writes its manifests and metadata through pyiceberg, and must reach the
    same store. Nothing for a local warehouse."""
    base, _, query = warehouse.partition("?")
    if not base.startswith("s3://") or not query:
        return {}
    options = dict(parse_qsl(query))
    properties: dict[str, str] = {}
    if "region" in options:
        properties[S3_REGION] = options["region"]
    if "endpoint_override" in options:
        endpoint = options["endpoint_override"]
        if "://" not in endpoint:
            endpoint = f"{options.get('scheme', 'https')}://{endpoint}"
        properties[S3_ENDPOINT] = endpoint
    for option, key in (
        ("access_key", S3_ACCESS_KEY_ID),
        ("secret_key", S3_SECRET_ACCESS_KEY),
        ("session_token", S3_SESSION_TOKEN),
    ):
        if option in options:
            properties[key] = options[option]
    if options.get("anonymous", "").lower() in ("true", "1"):
        properties[S3_ANONYMOUS] = "true"
    return properties
