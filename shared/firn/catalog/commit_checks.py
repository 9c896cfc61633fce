"""What must still hold when a compaction plan commits, one small object per check.

After pyiceberg's commit requirements (``AssertRefSnapshotId``,
``AssertCurrentSchemaId``, ...): each check states one fact the plan was made under,
and says, inside the commit's transaction and under its locks, whether the catalog
still agrees. A check that fails fails the plan (``firn.catalog.compactions``); the
partition is then free to be planned again from what is there now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from firn.postgres.connection import Connection


class CommitCheck(Protocol):
    def failure(self, conn: Connection) -> str | None:
        """Why the plan may not commit, or None when the fact still holds."""
        ...


@dataclass(frozen=True)
class MergedSeqUnchanged:
    """No other fold moved the partition's ``max_merged_seq`` since the plan was
    made: its merge rule (seq above ``from_seq`` wins) is still the partition's."""

    table_id: int
    partition_key: str
    from_seq: int

    def failure(self, conn: Connection) -> str | None:
        row = conn.execute(
            "SELECT max_merged_seq FROM catalog_partition WHERE table_id = %s "
            "AND partition_key = %s FOR UPDATE",
            (self.table_id, self.partition_key),
        ).fetchone()
        if row is not None and int(row[0]) == self.from_seq:
            return None
        return f"max_merged_seq moved from {self.from_seq} to {None if row is None else row[0]}"


@dataclass(frozen=True)
class InputsLive:
    """Every file the plan read is still live: no other commit (a load replacing the
    partition, another plan) removed one, so the outputs replace exactly them."""

    file_ids: Sequence[int]

    def failure(self, conn: Connection) -> str | None:
        row = conn.execute(
            "SELECT count(*) FROM data_file WHERE file_id = ANY(%s) AND removed_snapshot IS NULL",
            (list(self.file_ids),),
        ).fetchone()
        if row is not None and int(row[0]) == len(self.file_ids):
            return None
        return "an input file was removed by another commit"


def first_failure(conn: Connection, checks: Sequence[CommitCheck]) -> str | None:
    """The first check that fails, in order, or None when all hold."""
    for check in checks:
        if (why := check.failure(conn)) is not None:
            return why
    return None
