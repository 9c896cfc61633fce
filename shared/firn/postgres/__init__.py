"""The Postgres edge of the core library: connections, migrations, the service registry."""

from firn.postgres.connection import connect
from firn.postgres.migrate import MIGRATIONS, Migration, applied_versions, apply_migrations

__all__ = ["MIGRATIONS", "Migration", "applied_versions", "apply_migrations", "connect"]
