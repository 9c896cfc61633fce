"""Reading and writing table files under one root, through ``pyarrow.fs``.

A root is a local directory (relative paths are made absolute, so every process
agrees on it) or a URI any ``pyarrow.fs`` file system understands, such as
``s3://bucket/prefix?region=eu-west-1&endpoint_override=...``. The catalog stores file
paths relative to their table's location, so a table's files are found the same way
whichever process reads them.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from firn.errors import ConfigError, StorageError


def _has_scheme(uri: str) -> bool:
    head, sep, _ = uri.partition("://")
    return bool(sep) and head.isalnum() and len(head) > 1


CREDENTIAL_OPTIONS = ("access_key", "secret_key", "session_token")
"""``pyarrow.fs`` URI options that carry credentials. The warehouse becomes part of
every new table's location, which the catalog stores and shows to every reader, so a
warehouse holding one is refused: credentials come from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, a profile or an instance role)."""


def resolve_root(uri: str) -> str:
    """``uri`` made absolute when it is a local path; URIs are kept as given."""
    if not uri:
        raise ConfigError("the warehouse location is empty; set FIRN_WAREHOUSE")
    if _has_scheme(uri):
        return uri.rstrip("/")
    return str(Path(uri).expanduser().resolve())


def warehouse_root(uri: str) -> str:
    """The warehouse setting as a root for new tables: ``resolve_root``, refusing a
    URI that carries credentials (``CREDENTIAL_OPTIONS``)."""
    root = resolve_root(uri)
    if _has_scheme(root):
        _refuse_credentials(root)
    return root


def _refuse_credentials(uri: str) -> None:
    base, _, query = uri.partition("?")
    given = [pair.partition("=")[0] for pair in query.split("&") if pair]
    found = sorted({name for name in given if name.lower() in CREDENTIAL_OPTIONS})
    # The authority may hold a password too (scheme://user:secret@host/...).
    authority = base.partition("://")[2].split("/")[0]
    if ":" in authority.rpartition("@")[0]:
        found.append("a user:password@ login")
    if found:
        # The message names the options, never their values.
        raise ConfigError(
            f"the warehouse location carries credentials ({', '.join(found)}): it is stored "
            "in the catalog and shown to every reader. Give them in the environment "
            "instead (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, a "
            "profile or an instance role)"
        )


def join_location(root: str, child: str) -> str:
    """``root`` with one more path segment, keeping a URI's query (``?region=...``)
    at the end where ``pyarrow.fs`` expects it."""
    base, sep, query = root.partition("?")
    return f"{base.rstrip('/')}/{child}{sep}{query}"


def file_uri(root: str, relative: str) -> str:
    """The full URI of a file under a table's ``root``, as other engines name it: a URI
    for an object store (without the query ``pyarrow.fs`` options ride in: Iceberg's
    readers take those from their catalog properties, Spark from its Hadoop
    settings), ``file://`` for a local path."""
    base = root.partition("?")[0].rstrip("/")
    if "://" not in base:
        base = "file://" + base
    return f"{base}/{relative}" if relative else base


@dataclass(frozen=True)
class StoredFile:
    """One file found by ``Storage.walk``."""

    path: str
    """Relative to the storage root."""
    size: int
    modified: dt.datetime | None
    """When it was last written (timezone-aware), if the file system says."""


class Storage:
    """Files under one root location, addressed by paths relative to it."""

    def __init__(self, root: str) -> None:
        self.root = resolve_root(root)
        try:
            self.fs, self._base = pafs.FileSystem.from_uri(self.root)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise ConfigError(f"cannot use {self.root!r} as table storage: {exc}") from exc
        self._base = self._base.rstrip("/")

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    def full_path(self, relative: str) -> str:
        return posixpath.join(self._base, relative) if relative else self._base

    def write_parquet(
        self,
        relative: str,
        table: pa.Table,
        column_encoding: dict[str, str] | None = None,
        *,
        compression: str = "zstd",
        dictionary: list[str] | None = None,
    ) -> int:
        """Write ``table`` as one Parquet file; returns its size in bytes.
        ``column_encoding`` names a Parquet encoding per column; ``dictionary`` the
        columns dictionary-encoded (by default every column when no encoding is named,
        else none)."""
        sink = pa.BufferOutputStream()
        pq.write_table(
            table,
            sink,
            compression=compression,
            use_dictionary=(column_encoding is None) if dictionary is None else dictionary,
            column_encoding=column_encoding or None,
        )
        data = sink.getvalue()
        path = self.full_path(relative)
        try:
            with self._create(path) as out:
                out.write(data)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc
        return int(data.size)

    def open_output(self, relative: str) -> pa.NativeFile:
        """A new file to stream into (its directory is created)."""
        path = self.full_path(relative)
        try:
            return self._create(path)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def _create(self, path: str) -> pa.NativeFile:
        """A new file at ``path``, its directory created only when missing: on a
        local disk making sure of the directory cost as much again as creating a
        small file (0.2 ms against 0.4), and a commit creates several; object stores
        have no directories to miss."""
        try:
            return self.fs.open_output_stream(path)
        except FileNotFoundError:
            self.fs.create_dir(posixpath.dirname(path), recursive=True)
            return self.fs.open_output_stream(path)

    def read_parquet(self, relative: str, columns: Sequence[str] | None = None) -> pa.Table:
        """One whole file, unchecked: table data is read through
        ``firn.io.integrity``, which checks it against the catalog."""
        path = self.full_path(relative)
        try:
            return pq.read_table(path, columns=columns, filesystem=self.fs)
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        except pa.ArrowException as exc:
            raise StorageError(f"cannot read {path}: {exc}", retryable=False) from exc

    def delete(self, relative: str) -> None:
        """Remove one file; a file already gone is fine."""
        try:
            self.fs.delete_file(self.full_path(relative))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {self.full_path(relative)}: {exc}") from exc

    def exists(self, relative: str) -> bool:
        info = self.fs.get_file_info(self.full_path(relative))
        return bool(info.type != pafs.FileType.NotFound)

    def delete_dir(self, relative: str) -> None:
        """Remove a directory and everything under it; a directory already gone is fine."""
        path = self.full_path(relative.rstrip("/"))
        if path == self._base:
            raise ConfigError(f"refusing to delete the whole storage root {self.root!r}")
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {path}: {exc}") from exc

    def walk(self, relative: str = "") -> Iterator[StoredFile]:
        """Every file under ``relative``, one directory listing at a time: memory holds
        one directory's entries and the stack of directories still to list, never the
        whole tree (a table can hold millions of files). Order is unspecified."""
        pending = [self.full_path(relative)]
        prefix = f"{self._base}/" if self._base else ""
        while pending:
            directory = pending.pop()
            selector = pafs.FileSelector(directory, allow_not_found=True, recursive=False)
            try:
                entries = self.fs.get_file_info(selector)
            except OSError as exc:
                raise StorageError(f"cannot list {directory}: {exc}") from exc
            for entry in entries:
                if entry.type == pafs.FileType.Directory:
                    pending.append(entry.path)
                elif entry.type == pafs.FileType.File:
                    yield StoredFile(
                        path=entry.path.removeprefix(prefix),
                        size=int(entry.size or 0),
                        modified=_aware(entry.mtime),
                    )


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    """``pyarrow.fs`` reports UTC times, naive on some file systems."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=dt.UTC)
