"""``Table.verify``: every live file checked against the catalog, like a file system
check. Nothing is repaired; the report says what is wrong with which file.

Per file: it exists, its size is the one recorded, its Parquet footer parses, the
footer's record count is the one recorded, and it holds the columns its type needs
(``stored_schema``) with the table's types. ``deep`` also decodes every row and
counts them, which finds a damaged data page behind a sound footer, at the cost of
reading the whole table. Problems of one file are all reported (a truncated file is
both the wrong size and unreadable), so a damaged file and a catalog row that lies
about a sound file can be told apart. A base file's deletion vector is checked the
same way, and its positions decoded (they must fit the base file).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from firn.engine.scan import stored_schema
from firn.errors import CorruptFileError
from firn.io.deletion_vectors import SCHEMA as VECTOR_SCHEMA
from firn.io.deletion_vectors import read_positions
from firn.io.integrity import Problem, inspect_file
from firn.io.storage import Storage
from firn.model.files import FileEntry
from firn.model.schema import TableSchema

Progress = Callable[[int, int], None]
"""Called after each file with (files checked so far, files to check)."""


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong with one live file."""

    path: str
    """Full path of the file."""
    file_id: int
    partition: str
    store: str
    file_type: str
    kind: str
    """``missing``, ``size``, ``unreadable``, ``record-count``, ``schema``, or ``io``
    (could not be read just now: perhaps a transient storage error)."""
    detail: str


@dataclass(frozen=True)
class VerifyReport:
    """What ``Table.verify`` found."""

    table: str
    snapshot: int
    deep: bool
    files_checked: int
    bytes_checked: int
    """The catalog's sizes of the files checked."""
    problems: tuple[FileProblem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def damaged_files(self) -> int:
        return len({p.file_id for p in self.problems})

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "snapshot": self.snapshot,
            "deep": self.deep,
            "ok": self.ok,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "damaged_files": self.damaged_files,
            "problems": [asdict(p) for p in self.problems],
        }


def _vector_problems(storage: Storage, entry: FileEntry) -> list[Problem]:
    """What is wrong with a base file's deletion vector: the file as any other, then
    its positions (few, so always decoded)."""
    vector = entry.deletion_vector
    assert vector is not None
    problems = inspect_file(storage, vector, VECTOR_SCHEMA)
    if not problems:
        try:
            # Storage as it is now: a vector this process read earlier may have changed.
            read_positions(storage, vector, entry.record_count, cached=False)
        except CorruptFileError as exc:
            problems.append(Problem(exc.problem, exc.detail))
    return problems


def verify_files(
    storage: Storage,
    table: TableSchema,
    snapshot: int,
    entries: Sequence[FileEntry],
    *,
    deep: bool = False,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check ``entries`` (the live files of ``snapshot``) one by one."""
    problems: list[FileProblem] = []
    for done, entry in enumerate(entries, start=1):
        required = stored_schema(table, entry.file_type, entry.schema_id)
        found = [(entry.path, p) for p in inspect_file(storage, entry, required, deep=deep)]
        if entry.deletion_vector is not None:
            found += [(entry.deletion_vector.path, p) for p in _vector_problems(storage, entry)]
        for path, problem in found:
            problems.append(
                FileProblem(
                    path=storage.full_path(path),
                    file_id=entry.file_id,
                    partition=entry.partition_key,
                    store=entry.store,
                    file_type=entry.file_type,
                    kind=problem.kind,
                    detail=problem.detail,
                )
            )
        if progress is not None:
            progress(done, len(entries))
    return VerifyReport(
        table=table.name,
        snapshot=snapshot,
        deep=deep,
        files_checked=len(entries),
        bytes_checked=sum(e.size_bytes for e in entries),
        problems=tuple(problems),
    )
