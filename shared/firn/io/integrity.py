"""Checking data files against what the catalog recorded, and naming the bad one.

The catalog records every data file's size and record count. A file replaced by
valid Parquet with fewer rows reads without any error from pyarrow, and a merge
would then commit the loss; so every read checks, before decoding a row, the size
the file system reports and the record count in the Parquet footer, and afterwards
that the rows decoded add up to the count. A mismatch is a ``CorruptFileError``.

Which failures are worth retrying (``StorageError.retryable``):

- a missing file, a size or record-count mismatch, a footer that does not parse
  (``ArrowInvalid`` and pyarrow's other non-I/O errors): the bytes are wrong and
  will be wrong next time, so ``CorruptFileError``, never retried;
- an ``OSError`` while opening or reading: may be transient (a network file
  system's timeout, a throttled S3 request), so retryable; except that pyarrow also
  reports a bad data page as a plain ``OSError``. To tell the two apart, such an
  error is followed by one probe (only on this error path): the file's bytes are
  fetched whole and decoded in memory. Bytes that arrive but do not decode are
  corruption; a fetch that fails, or bytes that now decode, were an I/O problem.

This module knows files only as ``ExpectedFile`` (a path relative to the table, a
size and a record count), so the catalog's entries and the task specs an executor
receives both fit it without this layer importing either.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from firn.errors import CorruptFileError, StorageError
from firn.io.storage import Storage

MISSING = "missing"
SIZE = "size"
UNREADABLE = "unreadable"
RECORD_COUNT = "record-count"
SCHEMA = "schema"
IO = "io"
"""Not corruption: the file could not be read just now (a retryable error)."""


class ExpectedFile(Protocol):
    """What the catalog says about one data file."""

    @property
    def path(self) -> str:
        """Relative to the table's location."""
        ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def record_count(self) -> int: ...


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file."""

    kind: str
    """``missing``, ``size``, ``unreadable``, ``record-count``, ``schema`` or ``io``."""
    detail: str


def translate(storage: Storage, relative: str, exc: BaseException) -> StorageError:
    """A pyarrow or OS error about one file as a Firn error naming it (see the
    module doc for which are retryable)."""
    path = storage.full_path(relative)
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, FileNotFoundError):
        return CorruptFileError(path, MISSING, "missing (the catalog lists it as live)")
    if isinstance(exc, OSError):
        return _probe(storage, relative, exc)
    if isinstance(exc, pa.ArrowException) and not isinstance(exc, MemoryError):
        return CorruptFileError(path, UNREADABLE, f"not readable Parquet: {_first_line(exc)}")
    return StorageError(f"cannot read {path}: {exc!r}", retryable=True)


def _probe(storage: Storage, relative: str, exc: OSError) -> StorageError:
    path = storage.full_path(relative)
    try:
        with storage.fs.open_input_stream(path) as stream:
            data = stream.read()
    except FileNotFoundError:
        return CorruptFileError(path, MISSING, "missing (the catalog lists it as live)")
    except OSError:
        return StorageError(f"cannot read {path}: {_first_line(exc)}", retryable=True)
    try:
        pq.read_table(pa.BufferReader(data))
    except (OSError, pa.ArrowException) as bad:
        return CorruptFileError(path, UNREADABLE, f"not readable Parquet: {_first_line(bad)}")
    return StorageError(
        f"cannot read {path} (it reads fine now: a transient I/O error?): {_first_line(exc)}",
        retryable=True,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def stat_problems(expected: ExpectedFile, info: pafs.FileInfo) -> list[Problem]:
    """Existence and size, from one ``get_file_info`` answer."""
    if info.type == pafs.FileType.NotFound:
        return [Problem(MISSING, "missing (the catalog lists it as live)")]
    if info.type != pafs.FileType.File:
        return [Problem(MISSING, f"is a {info.type.name}, not a file")]
    if info.size != expected.size_bytes:
        return [Problem(SIZE, f"is {info.size} bytes, the catalog says {expected.size_bytes}")]
    return []


def check_sizes(storage: Storage, files: Sequence[ExpectedFile]) -> None:
    """Raise ``CorruptFileError`` for the first of ``files`` that is missing or not
    the size the catalog recorded (one ``get_file_info`` call for all of them)."""
    if not files:
        return
    try:
        infos = storage.fs.get_file_info([storage.full_path(f.path) for f in files])
    except OSError as exc:
        raise StorageError(f"cannot list table files under {storage.root}: {exc}") from exc
    for f, info in zip(files, infos, strict=True):
        for problem in stat_problems(f, info):
            raise CorruptFileError(storage.full_path(f.path), problem.kind, problem.detail)


def footer_problems(
    parquet: pq.ParquetFile, expected: ExpectedFile, required: pa.Schema | None
) -> list[Problem]:
    """The footer's record count, and the columns ``required`` names with their types."""
    problems = []
    rows = parquet.metadata.num_rows
    if rows != expected.record_count:
        problems.append(
            Problem(RECORD_COUNT, f"holds {rows} rows, the catalog says {expected.record_count}")
        )
    if required is not None:
        schema = parquet.schema_arrow
        names = set(schema.names)
        missing = [f.name for f in required if f.name not in names]
        wrong = [
            f"{f.name} is {schema.field(f.name).type}, expected {f.type}"
            for f in required
            if f.name in names and not schema.field(f.name).type.equals(f.type)
        ]
        if missing:
            problems.append(Problem(SCHEMA, f"lacks the column(s) {', '.join(missing)}"))
        if wrong:
            problems.append(Problem(SCHEMA, "; ".join(wrong)))
    return problems


def _raise_first(storage: Storage, expected: ExpectedFile, problems: list[Problem]) -> None:
    if problems:
        first = problems[0]
        raise CorruptFileError(storage.full_path(expected.path), first.kind, first.detail)


WHOLE_READ_BELOW = 1 << 20
"""A file smaller than this is fetched in one read and decoded from memory: pyarrow
reads a file in place in several reads (the footer's length, the footer, each column
chunk), which on a producer's change file of a few KiB cost more than decoding it (a
50-row file: 0.18-0.26 ms fetched whole against 0.32-0.35 ms in place, and no stat
for its size, which the bytes fetched give); a fold of a small partition reads ten
such files."""


def fetched_whole(storage: Storage, expected: ExpectedFile) -> pa.Buffer | None:
    """The bytes of a file smaller than ``WHOLE_READ_BELOW``, checked against the size
    the catalog recorded; None for a larger one, whose size is checked by a stat
    (``check_sizes``) and which is read in place. A missing file, or one of another
    size, raises the ``CorruptFileError`` ``check_sizes`` raises."""
    if expected.size_bytes >= WHOLE_READ_BELOW:
        check_sizes(storage, [expected])
        return None
    path = storage.full_path(expected.path)
    try:
        with storage.fs.open_input_stream(path) as stream:
            data = stream.read_buffer(expected.size_bytes + 1)  # one more: a longer file shows
    except OSError as exc:
        check_sizes(storage, [expected])  # missing, or not a file: named as a stat names it
        raise translate(storage, expected.path, exc) from exc
    if data.size != expected.size_bytes:
        check_sizes(storage, [expected])  # its size, as a stat reports it
        raise CorruptFileError(
            path, SIZE, f"read {data.size} bytes, the catalog says {expected.size_bytes}"
        )
    return data


def _source(storage: Storage, path: str, whole: pa.Buffer | None) -> pa.NativeFile:
    """What ``pq.ParquetFile`` reads: the bytes fetched whole, or the file in place."""
    return pa.BufferReader(whole) if whole is not None else storage.fs.open_input_file(path)


DECODE_THREADS_ABOVE = 1 << 20
"""A file larger than this decodes its columns on pyarrow's thread pool; a smaller one
(a producer's change file is a few KiB) decodes sooner on the calling thread than it
is handed to the pool and back (0.52 -> 0.42 ms for a 250-row file of the demo)."""


def read_batches(
    storage: Storage,
    expected: ExpectedFile,
    columns: Sequence[str],
    batch_rows: int,
    required: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """The file's ``columns`` (those it has) batch by batch, after checking its size,
    footer record count and ``required`` columns; once exhausted, also that the rows
    read equal the record count. Any failure is a ``StorageError`` naming the file."""
    whole = fetched_whole(storage, expected)
    path = storage.full_path(expected.path)
    read = 0
    try:
        with _source(storage, path, whole) as source:
            parquet = pq.ParquetFile(source)
            _raise_first(storage, expected, footer_problems(parquet, expected, required))
            names = set(parquet.schema_arrow.names)  # built anew on every access
            present = [c for c in columns if c in names]
            batches = parquet.iter_batches(
                batch_size=batch_rows,
                columns=present,
                use_threads=expected.size_bytes > DECODE_THREADS_ABOVE,
            )
            for batch in batches:
                read += batch.num_rows
                yield batch
    except (OSError, pa.ArrowException) as exc:
        raise translate(storage, expected.path, exc) from exc
    if read != expected.record_count:
        raise CorruptFileError(
            path, RECORD_COUNT, f"{read} rows were read, the catalog says {expected.record_count}"
        )


def read_whole(
    storage: Storage,
    expected: ExpectedFile,
    columns: Sequence[str],
    required: pa.Schema | None = None,
    footers: dict[str, pq.FileMetaData] | None = None,
) -> pa.Table:
    """The file's ``columns`` (those it has) as one table, its columns decoded on
    pyarrow's threads, checked as ``read_batches`` checks it. For a reader that keeps
    the whole file anyway: one call decodes faster than batch after batch.
    ``footers``: footers already checked, by path; this file's is added once it is
    (a reader that reads a file a few columns at a time checks and decodes its footer
    once: a wide file's footer takes milliseconds to decode)."""
    rows, _ = _read_groups(storage, expected, columns, required, footers, None)
    return rows


Span = tuple[int, int]
"""A row group's first row in its file, and its rows."""


def read_matching(
    storage: Storage,
    expected: ExpectedFile,
    columns: Sequence[str],
    row_filter: pc.Expression,
    required: pa.Schema | None = None,
) -> tuple[pa.Table, list[Span]]:
    """The file's ``columns`` (those it has) in the row groups whose statistics say
    they may hold a row ``row_filter`` keeps, whole (not filtered), and each such
    group's span in file order: a base file is cut in key order, so a key's filter
    leaves one row group of each file. Checked as ``read_whole`` checks a file. A
    filter the file's columns cannot judge (one naming a column the file lacks) keeps
    every group."""
    return _read_groups(storage, expected, columns, required, None, row_filter)


def _read_groups(
    storage: Storage,
    expected: ExpectedFile,
    columns: Sequence[str],
    required: pa.Schema | None,
    footers: dict[str, pq.FileMetaData] | None,
    row_filter: pc.Expression | None,
) -> tuple[pa.Table, list[Span]]:
    """``read_whole`` and ``read_matching``: every row group, or those ``row_filter``
    may keep, with their spans. The footer is checked against the catalog (size,
    record count, ``required`` columns) unless ``footers`` holds it already, and the
    rows decoded are counted against the footer's for the groups read."""
    path = storage.full_path(expected.path)
    footer = None if footers is None else footers.get(path)
    whole = fetched_whole(storage, expected) if footer is None else None
    try:
        with _source(storage, path, whole) as source:
            parquet = pq.ParquetFile(source, metadata=footer)
            if footer is None:
                _raise_first(storage, expected, footer_problems(parquet, expected, required))
                if footers is not None:
                    footers[path] = parquet.metadata
            names = set(parquet.schema_arrow.names)
            present = [c for c in columns if c in names]
            groups = None if row_filter is None else _groups_matching(source, row_filter)
            if groups is None:
                groups = list(range(parquet.metadata.num_row_groups))
                rows = parquet.read(columns=present, use_threads=True)
            else:
                rows = parquet.read_row_groups(groups, columns=present, use_threads=True)
            spans = _spans(parquet.metadata, groups)
    except (OSError, pa.ArrowException) as exc:
        raise translate(storage, expected.path, exc) from exc
    footer_rows = sum(n for _, n in spans)
    if rows.num_rows != footer_rows:
        raise CorruptFileError(
            path,
            RECORD_COUNT,
            f"{rows.num_rows} rows were read from {len(groups)} row groups, their footer "
            f"says {footer_rows}",
        )
    return rows, spans


def _spans(footer: pq.FileMetaData, groups: Sequence[int]) -> list[Span]:
    """Each of ``groups``' first row in the file and its rows, by the footer."""
    starts = list(
        itertools.accumulate(
            (footer.row_group(g).num_rows for g in range(footer.num_row_groups)), initial=0
        )
    )
    return [(starts[g], starts[g + 1] - starts[g]) for g in groups]


def _groups_matching(source: pa.NativeFile, row_filter: pc.Expression) -> list[int] | None:
    """The row groups of an open Parquet file that ``row_filter`` may keep, judged by
    their statistics; None when the filter cannot be judged."""
    fragment = ds.ParquetFileFormat().make_fragment(source)
    try:
        return [g.id for g in fragment.subset(filter=row_filter).row_groups]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None  # a column the file lacks, or one it stores as another type


def inspect_file(
    storage: Storage, expected: ExpectedFile, required: pa.Schema | None, deep: bool = False
) -> list[Problem]:
    """Everything wrong with one file: existence, size, footer, record count, columns
    and, when ``deep``, every row decoded and counted. Empty when the file is sound."""
    path = storage.full_path(expected.path)
    try:
        info = storage.fs.get_file_info(path)
    except OSError as exc:
        return [Problem(IO, f"cannot be listed: {_first_line(exc)}")]
    problems = stat_problems(expected, info)
    if problems and problems[0].kind == MISSING:
        return problems
    try:
        with storage.fs.open_input_file(path) as source:
            parquet = pq.ParquetFile(source)
            problems += footer_problems(parquet, expected, required)
            if deep:
                decoded = sum(b.num_rows for b in parquet.iter_batches(batch_size=65536))
                if decoded != parquet.metadata.num_rows:
                    problems.append(
                        Problem(
                            RECORD_COUNT,
                            f"{decoded} rows decoded, its footer says {parquet.metadata.num_rows}",
                        )
                    )
    except (OSError, pa.ArrowException) as exc:
        error = translate(storage, expected.path, exc)
        kind = error.problem if isinstance(error, CorruptFileError) else IO
        detail = error.detail if isinstance(error, CorruptFileError) else str(error)
        problems.append(Problem(kind, detail))
    return problems
