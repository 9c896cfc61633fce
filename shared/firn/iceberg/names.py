"""A Firn table's name as an Iceberg table identifier.

The name is kept as it is: its dots separate namespace levels, as Iceberg's
SQL/JDBC catalog reads them, so ``sales.orders`` is table ``orders`` in namespace
``sales``. A name without a dot goes to namespace ``default`` (Spark's default
namespace; pyiceberg and Spark address no table outside a namespace), so
``orders`` is ``default.orders``. A name with an empty level (``a..b``, ``a.``) has
no Iceberg identifier: its table is not published, and the publisher says why, as
it does when two Firn tables would share one (``orders`` and ``default.orders``).
"""

from __future__ import annotations

from dataclasses import dataclass

from firn.errors import ConfigError

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class IcebergName:
    namespace: tuple[str, ...]
    table: str

    @property
    def namespace_text(self) -> str:
        """The namespace as the SQL catalog stores it (``""`` for none)."""
        return ".".join(self.namespace)

    def __str__(self) -> str:
        return ".".join((*self.namespace, self.table))


def iceberg_name(firn_name: str) -> IcebergName:
    """The identifier ``firn_name`` is published under; ``ConfigError`` if it has none."""
    parts = firn_name.split(".")
    if any(not part for part in parts):
        raise ConfigError(
            f"table {firn_name!r} cannot be published to Iceberg: an Iceberg identifier's "
            "dots separate namespace levels, and no level may be empty; rename the table "
            "or set iceberg.publish to false"
        )
    return IcebergName(tuple(parts[:-1]) or (DEFAULT_NAMESPACE,), parts[-1])
