"""What must still hold when a compaction plan commits, one small object per check.

After pyiceberg's commit requirements (``AssertRefSnapshotId``,
``AssertCurrentSchemaId``, ...): each check states one fact the plan was made under,
and says, inside the commit's transaction and under its locks, whether the catalog
still agrees, against facts read once for all the plans of a commit
(``CommitFacts``). A check that fails fails the plan (``firn.catalog.compactions``); the
partition is then free to be planned again from what is there now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from firn.postgres.connection import Connection


@dataclass(frozen=True)
class CommitFacts:
    """What the checks of every plan of one commit look at, read once under the
    commit's locks (a commit of a table's four plans made a statement per check and
    plan before): each locked partition's ``max_merged_seq`` and which of the plans'
    input files are live."""

    merged_seqs: Mapping[str, int]
    live_files: frozenset[int]

    @classmethod
    def read(
        cls, conn: Connection, merged_seqs: Mapping[str, int], file_ids: Sequence[int]
    ) -> CommitFacts:
        """The facts, given the merged seqs the partition locks returned; the live
        files in one statement."""
        rows = conn.execute(
            "SELECT file_id FROM data_file WHERE file_id = ANY(%s) AND removed_snapshot IS NULL",
            (sorted(set(file_ids)),),
        ).fetchall()
        return cls(dict(merged_seqs), frozenset(int(r[0]) for r in rows))


class CommitCheck(Protocol):
    def failure(self, facts: CommitFacts) -> str | None:
        """Why the plan may not commit, or None when the fact still holds."""
        ...


@dataclass(frozen=True)
class MergedSeqUnchanged:
    """No other fold moved the partition's ``max_merged_seq`` since the plan was
    made: its merge rule (seq above ``from_seq`` wins) is still the partition's."""

    partition_key: str
    from_seq: int

    def failure(self, facts: CommitFacts) -> str | None:
        now = facts.merged_seqs.get(self.partition_key)
        if now == self.from_seq:
            return None
        return f"max_merged_seq moved from {self.from_seq} to {now}"


@dataclass(frozen=True)
class InputsLive:
    """Every file the plan read is still live: no other commit (a load replacing the
    partition, another plan) removed one, so the outputs replace exactly them."""

    file_ids: Sequence[int]

    def failure(self, facts: CommitFacts) -> str | None:
        if facts.live_files.issuperset(self.file_ids):
            return None
        return "an input file was removed by another commit"


def first_failure(facts: CommitFacts, checks: Sequence[CommitCheck]) -> str | None:
    """The first check that fails, in order, or None when all hold."""
    for check in checks:
        if (why := check.failure(facts)) is not None:
            return why
    return None
