"""Each service of the local stack logs in to the catalog as a role of its own
(``firn_<service>_login``, a member of the service's group role), so the stack runs
with the privileges a production deployment would give it, not as the admin."""

from __future__ import annotations

import secrets

import firn
from firn.catalog.grants import service_login
from firn.postgres.urls import url_as
from firn.settings import FirnSettings


def service_environments(
    settings: FirnSettings, services: tuple[str, ...]
) -> dict[str, dict[str, str]]:
    """Bring the catalog up to date as its admin (``settings``), give each service a
    login role with a new password, and return each service's ``FIRN_DATABASE_URL``."""
    admin_url = settings.database_dsn()
    environments = {}
    with firn.connect(settings=settings) as catalog:
        for name in services:
            password = secrets.token_urlsafe(18)
            role = service_login(catalog.conn, name, password)
            environments[name] = {"FIRN_DATABASE_URL": url_as(admin_url, role, password)}
    return environments
