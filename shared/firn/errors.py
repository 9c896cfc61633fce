"""One error tree for all of Firn.

    FirnError                     root; ``retryable`` says whether trying again may help
    +-- ConfigError               bad settings or arguments; never retryable
    |   +-- SnapshotExpiredError  the snapshot is older than snapshot.retention
    +-- StackError                the local stack (Kafka, Postgres) could not start or stop
    +-- MigrationError            the catalog schema could not be brought up to date
    +-- ServiceError              a service failed at its edge (Kafka, Postgres)
    +-- EventMismatchError        an event disagrees with the catalog row it names
    +-- StorageError              table files could not be read or written (retryable)
    |   +-- CorruptFileError      a data file is missing, damaged or does not match the
    |                             catalog's size or record count; never retryable
    +-- AccessDeniedError         the catalog refused: the role may not do that
    +-- CommitError               a commit was not applied; nothing of it is visible
        +-- CommitStateUnknownError   the outcome is unknown (the connection broke
                                      while committing); staged files are kept

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


class SnapshotExpiredError(ConfigError):
    """The snapshot asked for has expired (``snapshot.retention``): files only it
    could read may already be deleted, so it cannot be read any more."""


class StackError(FirnError):
    """The local stack could not be brought up or down."""


class MigrationError(FirnError):
    """The catalog schema could not be migrated."""


class ServiceError(FirnError):
    """A service could not reach or use one of its dependencies."""

    retryable = True


class EventMismatchError(FirnError):
    """An event names a catalog row (a task, plan, partition, snapshot) but disagrees
    with it, or names one that does not exist: forged, corrupted or from another
    deployment. It changes nothing and goes to the dead-letter topic with the reason."""


class AccessDeniedError(FirnError):
    """The catalog refused the work: the database role Firn connected as may not do
    it (a producer committing to a table it was not granted, a reader committing,
    a service writing rows that are not its own). Never retryable: an admin must
    grant it (``firn grant``) or the work must run as another role."""


class StorageError(FirnError):
    """Table files could not be read or written; usually worth retrying."""

    retryable = True


class CorruptFileError(StorageError):
    """A data file is missing, cannot be decoded, or does not match the size, record
    count or columns the catalog recorded for it. Trying again reads the same bytes,
    so it is never retryable; ``path`` names the file and ``problem`` says what is
    wrong (``missing``, ``size``, ``unreadable``, ``record-count``, ``schema``)."""

    retryable = False

    def __init__(self, path: str, problem: str, detail: str) -> None:
        super().__init__(f"table file {path}: {detail}", retryable=False)
        self.path = path
        self.problem = problem
        self.detail = detail


class CommitError(FirnError):
    """A commit was not applied: none of it is visible to readers."""


class CommitStateUnknownError(CommitError):
    """The catalog connection broke while committing, so the commit may or may not
    have landed. Its staged files are kept (deleting them could corrupt a commit
    that did land); check the table before committing the same changes again."""


def error_kind(exc: BaseException) -> str:
    """An error as a metric label (a dead letter's reason kind): the class name of
    Firn's own errors (``UnhandledEventError``, ``ConfigError``, ...), ``unexpected``
    for anything else, so label values stay few and never carry free text."""
    return type(exc).__name__ if isinstance(exc, FirnError) else "unexpected"
