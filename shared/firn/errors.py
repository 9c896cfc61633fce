"""One error tree for all of Firn.

    FirnError                     root; ``retryable`` says whether trying again may help
    +-- ConfigError               bad settings or arguments; never retryable
    +-- StackError                the local stack (Kafka, Postgres) could not start or stop
    +-- MigrationError            the catalog schema could not be brought up to date
    +-- ServiceError              a service failed at its edge (Kafka, Postgres)

Lower-level exceptions (psycopg, confluent-kafka, OSError) are translated at the
boundary where they are caught, with the original kept as ``__cause__``.
"""

from __future__ import annotations


class FirnError(Exception):
    """Root of every error Firn raises on purpose."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class ConfigError(FirnError):
    """Settings or arguments that cannot work; fix the input, do not retry."""


class StackError(FirnError):
    """The local stack could not be brought up or down."""


class MigrationError(FirnError):
    """The catalog schema could not be migrated."""


class ServiceError(FirnError):
    """A service could not reach or use one of its dependencies."""

    retryable = True
