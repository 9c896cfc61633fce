"""``PostgresTableCatalog``: the ``TableCatalog`` a Table talks to, over one
reconnecting Postgres connection and an optional commit-event publisher.

Here, and only here, database errors become the Table's errors. A commit whose
outcome is known to be a failure (a statement failed before COMMIT, or Postgres
answered COMMIT, or a commit that is one statement of its own, with an error, which
means it rolled back) is ``CommitError``. When the connection breaks *while*
committing, the outcome is unknown:
``CommitStateUnknownError``, and the Table keeps the staged files, because deleting
them would corrupt the commit if it did land. Their ``orphan_file`` records settle
it later without asking anyone (``firn.catalog.commits``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from firn.catalog import commits, files, loads, metrics, schemas, status, tables
from firn.errors import CommitError, CommitStateUnknownError, FirnError
from firn.events.commits import commit_event
from firn.events.envelope import EventSink
from firn.model.commits import CommitResult, Delivery, StagedFile, StreamBatch
from firn.model.files import FileEntry
from firn.model.properties import TableProperties
from firn.model.schema import SchemaVersion, TableSchema
from firn.postgres.connection import Connection, ReconnectingConnection, access_denied
from firn.settings import FirnSettings

UNKNOWN_OUTCOME_CLASSES = frozenset({"08", "53", "57", "58", "XX"})
"""SQLSTATE classes an error at COMMIT may carry without proving a rollback:
connection exceptions, insufficient resources, operator intervention (a shutdown),
system and internal errors. Any other error answering COMMIT means it rolled back."""


class PostgresTableCatalog:
    """The Postgres catalog as the Tables of one ``Catalog`` see it."""

    def __init__(
        self, settings: FirnSettings, db: ReconnectingConnection, publisher: EventSink | None
    ) -> None:
        self.settings = settings
        self.db = db
        self.publisher = publisher

    @property
    def conn(self) -> Connection:
        """The connection; a broken one is replaced here (for tools and the
        compaction path, which work on catalog rows directly)."""
        return self.db.conn

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        self.db.close()

    # -- committing ------------------------------------------------------------

    def stage_paths(self, table_id: int, paths: Sequence[str], *, refresh: bool = False) -> None:
        try:
            commits.stage_paths(self.conn, table_id, paths, refresh=refresh)
        except psycopg.Error as exc:
            self._raise_if_refused(exc, "staging files")
            # Nothing is written yet; a record left behind names no file and is
            # cleared by orphan cleanup. Trying the commit again is safe.
            raise CommitError(f"staging failed, nothing written: {exc}", retryable=True) from exc

    def stage_commit(self, table_id: int, paths: Sequence[str]) -> int:
        try:
            return commits.stage_commit(self.conn, table_id, paths)
        except psycopg.Error as exc:
            self._raise_if_refused(exc, "staging files")
            raise CommitError(f"staging failed, nothing written: {exc}", retryable=True) from exc

    def unstage_paths(self, table_id: int, paths: Sequence[str]) -> None:
        try:
            commits.unstage_paths(self.conn, table_id, paths)
        except psycopg.Error as exc:
            self._raise_if_refused(exc, "clearing staged files")
            raise CommitError(f"staged records not cleared: {exc}", retryable=True) from exc

    def register_commit(
        self,
        table_id: int,
        staged: Sequence[StagedFile],
        *,
        staged_dir: str | None = None,
        stream: StreamBatch | None = None,
        busiest: bool = False,
    ) -> CommitResult:
        return self._committing(
            "a commit",
            len(staged),
            lambda conn: commits.register_commit(
                conn, table_id, staged, staged_dir=staged_dir, stream=stream, busiest=busiest
            ),
            one_statement=True,
        )

    def register_load(
        self,
        table_id: int,
        staged: Sequence[StagedFile],
        staged_dir: str,
        partitions: Mapping[str, Mapping[str, str]] | None,
    ) -> CommitResult:
        return self._committing(
            "a bulk load",
            len(staged),
            lambda conn: loads.register_load(conn, table_id, staged, staged_dir, partitions),
        )

    def stream_batch_seq(self, table_id: int, batch: StreamBatch) -> int | None:
        return commits.stream_batch_seq(self.conn, table_id, batch)

    def record_empty_batch(self, table_id: int, batch: StreamBatch) -> None:
        try:
            commits.record_empty_batch(self.conn, table_id, batch)
        except psycopg.Error as exc:
            self._raise_if_refused(exc, "an empty stream batch")
            raise

    def _raise_if_refused(self, exc: psycopg.Error, what: str) -> None:
        denied = access_denied(self.conn, exc, what)
        if denied is not None:
            raise denied from exc

    def _committing(
        self,
        what: str,
        files: int,
        register: Callable[[Connection], CommitResult],
        *,
        one_statement: bool = False,
    ) -> CommitResult:
        """Run ``register`` as one transaction, its failures as the Table's errors.
        ``one_statement``: ``register`` is a single statement, which on an autocommit
        connection is its own transaction (two round trips fewer than BEGIN and
        COMMIT around it); its outcome is then unknown exactly when an answered
        COMMIT's would be (``_rolled_back``)."""
        conn = self.conn
        if one_statement and conn.autocommit:
            try:
                return register(conn)
            except psycopg.Error as exc:
                self._raise_if_refused(exc, what)
                if not _rolled_back(conn, exc):
                    raise self._unknown(files, exc) from exc
                raise CommitError(f"the commit failed: {exc}", retryable=True) from exc
        committing = False
        try:
            with conn.transaction():
                result = register(conn)
                committing = True
        except psycopg.Error as exc:
            self._raise_if_refused(exc, what)
            # Before COMMIT was sent, Postgres rolls back whatever happened; COMMIT
            # answered with an error rolled back too. Only a COMMIT whose answer was
            # lost leaves the outcome unknown.
            if committing and not _rolled_back(conn, exc):
                raise self._unknown(files, exc) from exc
            raise CommitError(f"the commit failed: {exc}", retryable=True) from exc
        return result

    @staticmethod
    def _unknown(files: int, exc: psycopg.Error) -> CommitStateUnknownError:
        return CommitStateUnknownError(
            f"the catalog connection failed while committing; the commit may or "
            f"may not have landed ({files} staged files kept, recorded for "
            f"orphan cleanup in case it did not): {exc}"
        )

    def announce_commit(
        self, table: str, table_id: int, result: CommitResult, staged: Sequence[StagedFile]
    ) -> Delivery | None:
        if self.publisher is None:
            return None
        return self.publisher.send(table, commit_event(table, table_id, result, staged))

    def busiest_nodes(
        self, table_id: int, partition_keys: Sequence[str]
    ) -> dict[str, tuple[str, int]]:
        try:
            return metrics.busiest_nodes(self.conn, table_id, partition_keys)
        except psycopg.Error as exc:
            raise FirnError(f"could not read the runs per node: {exc}", retryable=True) from exc

    def save_properties(self, table_id: int, properties: TableProperties) -> bool:
        try:
            return tables.save_properties(self.conn, table_id, properties)
        except psycopg.Error as exc:
            self._raise_if_refused(exc, "a change of table properties")
            raise

    # -- schema versions -------------------------------------------------------

    def commit_schema(
        self,
        table_id: int,
        expected_schema_id: int,
        definition: TableSchema,
        changes: Sequence[str],
    ) -> SchemaVersion:
        try:
            return schemas.commit_schema(
                self.conn, table_id, expected_schema_id, definition, changes
            )
        except psycopg.Error as exc:
            self._raise_if_refused(exc, "a schema change")
            raise CommitError(
                f"the schema change failed (if the connection broke while committing it may "
                f"have landed: `firn schema` shows the versions): {exc}",
                retryable=True,
            ) from exc

    def schema_versions(self, table_id: int) -> list[SchemaVersion]:
        return schemas.schema_versions(self.conn, table_id)

    def schema_id_at(self, table_id: int, snapshot_id: int) -> int:
        return schemas.schema_id_at(self.conn, table_id, snapshot_id)

    def current_schema_id(self, table_id: int) -> int:
        try:
            return schemas.current_schema_id(self.conn, table_id)
        except psycopg.Error as exc:
            raise CommitError(
                f"could not read the table's schema version, nothing written: {exc}",
                retryable=True,
            ) from exc

    # -- reading ---------------------------------------------------------------

    def current_snapshot(self, table_id: int) -> int:
        return files.current_snapshot(self.conn, table_id)

    def check_snapshot(self, table_id: int, snapshot_id: int) -> None:
        files.check_snapshot(self.conn, table_id, snapshot_id)

    def files_at(self, table_id: int, snapshot_id: int) -> list[FileEntry]:
        return files.files_at(self.conn, table_id, snapshot_id)

    def merged_seqs_at(self, table_id: int, snapshot_id: int) -> dict[str, int]:
        return files.merged_seqs_at(self.conn, table_id, snapshot_id)

    def committed_changes(
        self, table_id: int, after_snapshot: int, upto_snapshot: int
    ) -> list[FileEntry]:
        return files.committed_changes(self.conn, table_id, after_snapshot, upto_snapshot)

    def status(self, table_id: int, name: str, properties: TableProperties) -> dict[str, Any]:
        return status.table_status(self.conn, table_id, name, properties)


def _rolled_back(conn: Connection, exc: psycopg.Error) -> bool:
    """Whether an error raised by COMMIT proves the transaction rolled back: Postgres
    answered with an error, and the connection is still sound."""
    state = exc.sqlstate
    return state is not None and state[:2] not in UNKNOWN_OUTCOME_CLASSES and not conn.broken
