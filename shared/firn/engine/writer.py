"""Writing a task's output: key-sorted rows cut into files of at most target-file-size.

Rows are buffered into row groups and streamed into the current file. Before each
row group the writer estimates its encoded size from what this task has written so
far (at first from the Arrow size, which overstates Parquet's), and writes only the
rows that fit under the target less a reserve for the footer; the rest opens the
next file. So every file but a node's last stays under the target, without ever
holding a whole file in memory. Row groups are encoded in a background thread, so
writing overlaps the merge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from firn.errors import StorageError
from firn.io.storage import Storage
from firn.model.encodings import column_encodings
from firn.model.files import DEFAULT_CODEC
from firn.model.tasks import OutputFile
from firn.model.tree import Node
from firn.model.values import key_at

ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 16 << 20  # of Arrow memory buffered per row group at most
_SAFETY = 1.15  # estimates may be off by this much between row groups
PAGE_ROWS: int | None = None
"""Rows per data page at most; None keeps pyarrow's limit, 20,000 rows (parquet-mr's
too), and writers on Spark executors whose pyarrow predates the setting still work.
Every file gets a page index: a reader that uses it (Spark's Parquet reader, so Firn's
JVM merge reader under a filter) decodes only the pages a key's lookup may find it in,
not a whole row group of a million rows. Writing the index cost nothing measurable
(5M rows: the same time and bytes, 2026-12-04); pyarrow's own reader ignores it."""


class SizedWriter:
    """Streams rows into numbered Parquet files under one directory."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        *,
        schema: pa.Schema,
        node: Node,
        seq: int,
        target_size: int,
        key_columns: Sequence[str],
        file_type: str = "B",
        compression: str = DEFAULT_CODEC,
    ) -> None:
        self.storage = storage
        self.directory = directory
        self.schema = schema
        self.node = node
        self.seq = seq
        self.file_type = file_type
        self.compression = compression
        self.key_columns = list(key_columns)
        self.target_size = target_size
        # The footer is written last, so room is kept for it: a guess per column at
        # first, then what the previous file's footer took.
        self._footer = 512 + 256 * len(schema)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._encodings = column_encodings(schema, self.key_columns)
        self._sink: pa.NativeFile | None = None
        self._writer: pq.ParquetWriter | None = None
        self._path = ""
        self._rows = 0
        self._first: list[object] | None = None
        self._last_rows: pa.Table | None = None
        self._bytes_per_row: float | None = None
        self.outputs: list[OutputFile] = []
        self.rows_written = 0
        # Encoding and compressing a row group runs in a thread of its own (Arrow
        # releases the GIL there) while the caller merges the next rows; at most
        # one row group is in flight, so memory stays at two row groups.
        self._encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="firn-writer")
        self._in_flight: Future[None] | None = None

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self._pending.append(rows)
        self._pending_rows += rows.num_rows
        self._pending_bytes += rows.nbytes
        if self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
            parts = self._take_pending()
            self._wait()
            self._in_flight = self._encoder.submit(self._write_parts, parts)

    def cut(self) -> None:
        """End the current file here; the next rows start a new one."""
        self._flush()
        self._finish_file()

    def close(self) -> list[OutputFile]:
        """Write what is buffered and finish the last file; returns every file."""
        try:
            self._flush()
            self._finish_file()
        finally:
            self._encoder.shutdown()
        return self.outputs

    def abort(self) -> None:
        """Delete every file written so far (a failed attempt leaves nothing behind)."""
        with contextlib.suppress(Exception):  # the attempt failed already
            self._wait()
        self._encoder.shutdown()
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._writer = None
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        for path in [*(o.path for o in self.outputs), self._path]:
            if path:
                # Left behind, it is an orphan that orphan cleanup removes.
                with contextlib.suppress(StorageError):
                    self.storage.delete(path)
        self.outputs = []

    def _take_pending(self) -> list[pa.Table]:
        parts = self._pending
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        return parts

    def _wait(self) -> None:
        """Until the row group in flight is written (raising what its write raised)."""
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight.result()

    def _flush(self) -> None:
        """Write everything buffered, in this thread, after what is in flight."""
        self._wait()
        self._write_parts(self._take_pending())

    def _write_parts(self, parts: list[pa.Table]) -> None:
        if not parts:
            return
        rows = pa.concat_tables(parts).cast(self.schema)
        while rows.num_rows:
            if self._writer is None:
                self._open()
            assert self._sink is not None
            assert self._writer is not None
            per_row = self._bytes_per_row or rows.nbytes / rows.num_rows
            room = self._limit() - self._sink.tell()
            fit = min(rows.num_rows, int(room / (per_row * _SAFETY)))
            # Rather than trickle ever smaller row groups into a nearly full file,
            # start the next one once less than a sixteenth of a file would fit.
            worth = max(1, int(self._limit() / (per_row * _SAFETY)) // 16)
            if fit < min(rows.num_rows, worth) and self._rows:
                self._finish_file()
                continue
            fit = max(fit, 1)  # a target smaller than one row: one row per file
            chunk = rows.slice(0, fit)
            rows = rows.slice(fit)
            before = self._sink.tell()
            self._writer.write_table(chunk, row_group_size=chunk.num_rows)
            written = self._sink.tell() - before
            self._bytes_per_row = max(written / chunk.num_rows, 1e-3)
            if self._first is None and self.key_columns:
                self._first = key_at(chunk, self.key_columns, 0)
            self._last_rows = chunk
            self._rows += chunk.num_rows

    def _limit(self) -> int:
        """Bytes of row groups a file may take, leaving room for its footer."""
        reserve = max(min(self.target_size // 10, 256 * 1024), int(self._footer * 1.25))
        return self.target_size - min(reserve, self.target_size // 2)

    def _open(self) -> None:
        n = len(self.outputs)
        self._path = (
            f"{self.directory}/{self.file_type}-{self.node.m}-{self.node.i}-{n:05d}.parquet"
        )
        self._sink = self.storage.open_output(self._path)
        self._writer = pq.ParquetWriter(
            self._sink,
            self.schema,
            compression=self.compression,
            use_dictionary=self._encodings.dictionary,
            column_encoding=self._encodings.encoded or None,
            write_page_index=True,
            **({} if PAGE_ROWS is None else {"max_rows_per_page": PAGE_ROWS}),
        )
        self._rows = 0
        self._first = None

    def _finish_file(self) -> None:
        if self._writer is None or self._sink is None:
            return
        before_footer = self._sink.tell()
        self._writer.close()
        size = self._sink.tell()
        self._footer = size - before_footer
        self._sink.close()
        self._writer, self._sink = None, None
        last = self._last_rows
        keyed = bool(self.key_columns) and last is not None
        max_key = None
        if keyed and last is not None:
            max_key = key_at(last, self.key_columns, last.num_rows - 1)
        self.outputs.append(
            OutputFile(
                path=self._path,
                file_type=self.file_type,
                node_m=self.node.m,
                node_i=self.node.i,
                seq=self.seq,
                size_bytes=int(size),
                record_count=self._rows,
                min_key=self._first if keyed else None,
                max_key=max_key,
            )
        )
        self.rows_written += self._rows
        self._path = ""
