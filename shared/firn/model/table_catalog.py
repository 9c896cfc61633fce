"""What a ``Table`` needs of its catalog, as a Protocol: the Postgres catalog
(``firn.catalog.table_catalog``) implements it, and a test can fake it with a few
dicts. A Table never sees a connection, a transaction or a Kafka producer.

The contract every implementation keeps (design §3): ``stage_paths`` records paths
before their files are written; ``register_commit`` makes a commit visible in one
step and either returns, raises ``CommitError`` (it did not land, and the staged
records are still there), or raises ``CommitStateUnknownError`` (it may have
landed: the caller must keep the files); ``announce_commit`` is best effort.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from firn.model.commits import CommitResult, Delivery, StagedFile, StreamBatch
from firn.model.files import FileEntry
from firn.model.properties import TableProperties
from firn.model.schema import SchemaVersion, TableSchema


class TableCatalog(Protocol):
    """The catalog operations of one table, by ``table_id``."""

    # -- committing ------------------------------------------------------------

    def stage_paths(self, table_id: int, paths: Sequence[str], *, refresh: bool = False) -> None:
        """Record ``paths`` as staged before they are written; ``CommitError``
        (retryable) when that fails, and then nothing is written. ``refresh``: a
        path already staged (a stream's directory) is recorded anew instead."""

    def stage_commit(self, table_id: int, paths: Sequence[str]) -> int:
        """``stage_paths`` for a producer commit, answering the table's current schema
        version in the same step (the change set must have been checked against it)."""

    def unstage_paths(self, table_id: int, paths: Sequence[str]) -> None:
        """Forget staged paths whose files were deleted after a known failure;
        ``CommitError`` when that fails (orphan cleanup then finds them)."""

    def register_commit(
        self,
        table_id: int,
        staged: Sequence[StagedFile],
        *,
        staged_dir: str | None = None,
        stream: StreamBatch | None = None,
        busiest: bool = False,
    ) -> CommitResult:
        """Register the staged files as one seq and snapshot (the commit point).
        ``staged_dir``: the files were staged as one directory (``stage_paths`` of a
        path ending in ``/``) instead of by path. ``stream``: record the micro-batch
        in the same step; ``CommitError`` if it was committed before. ``busiest``:
        the result holds ``busiest_nodes`` of the partitions written, as of the commit."""

    def register_load(
        self,
        table_id: int,
        staged: Sequence[StagedFile],
        staged_dir: str,
        partitions: Mapping[str, Mapping[str, str]] | None,
    ) -> CommitResult:
        """Replace ``partitions`` (key -> column values; ``None``: the whole table)
        with the staged base files under ``staged_dir``, as one seq and snapshot.
        Fails like ``register_commit``."""

    def stream_batch_seq(self, table_id: int, batch: StreamBatch) -> int | None:
        """The seq a micro-batch was committed as (0: it was empty), None if never."""

    def record_empty_batch(self, table_id: int, batch: StreamBatch) -> None:
        """Remember a micro-batch that had no rows, so it counts as committed."""

    def announce_commit(
        self, table: str, table_id: int, result: CommitResult, staged: Sequence[StagedFile]
    ) -> Delivery | None:
        """Tell the services about a landed commit without waiting for them: what
        became of the message, ``None`` when there is no one to tell."""

    def busiest_nodes(
        self, table_id: int, partition_keys: Sequence[str]
    ) -> dict[str, tuple[str, int]]:
        """Per partition, its change node with the most sorted runs (unmerged change
        seqs) and how many: what back-pressure compares with ``write.stall-runs``."""

    def save_properties(self, table_id: int, properties: TableProperties) -> bool:
        """Store the table's properties; False when the table no longer exists."""

    # -- schema versions ---------------------------------------------------------

    def commit_schema(
        self,
        table_id: int,
        expected_schema_id: int,
        definition: TableSchema,
        changes: Sequence[str],
    ) -> SchemaVersion:
        """Make ``definition`` the table's schema (the version after
        ``expected_schema_id``) with a snapshot of its own, atomically; ``CommitError``
        (nothing changed) when the schema is no longer ``expected_schema_id``."""

    def schema_versions(self, table_id: int) -> list[SchemaVersion]:
        """Every version, oldest first."""

    def schema_id_at(self, table_id: int, snapshot_id: int) -> int:
        """The schema version a read of ``snapshot_id`` sees."""

    def current_schema_id(self, table_id: int) -> int:
        """The table's current schema version (what a commit is checked against)."""

    # -- reading ---------------------------------------------------------------

    def current_snapshot(self, table_id: int) -> int:
        """The latest snapshot id (0 before the first commit)."""

    def check_snapshot(self, table_id: int, snapshot_id: int) -> None:
        """``ConfigError`` when the snapshot never existed, ``SnapshotExpiredError``
        when retention removed it."""

    def files_at(self, table_id: int, snapshot_id: int) -> list[FileEntry]:
        """The live files as of ``snapshot_id``."""

    def merged_seqs_at(self, table_id: int, snapshot_id: int) -> dict[str, int]:
        """Each partition's max_merged_seq as of ``snapshot_id``."""

    def committed_changes(
        self, table_id: int, after_snapshot: int, upto_snapshot: int
    ) -> list[FileEntry]:
        """The change files producer commits added in snapshots
        ``(after_snapshot, upto_snapshot]``, whether still live or not; none from
        compactions."""

    def status(self, table_id: int, name: str, properties: TableProperties) -> dict[str, Any]:
        """``Table.status``: merge state, pending work and plans, per partition."""
