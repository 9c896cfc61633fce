"""The files a publication writes: position delete files and manifests.

Position deletes (Iceberg v2) say what Firn's deletion vectors say: one Parquet file
per vector, ``file_path`` and ``pos`` with Iceberg's reserved field ids, its
``file_path`` bounds naming the one data file it applies to so a reader skips it
for every other file. A vector that did not change keeps the delete files it was
published with (the publisher finds them in the previous snapshot's manifest); one
that grew adds a file of the positions it hides now and did not then.

Manifests hold one partition each, data or deletes, named by the partition and a
digest of what they list: a publication rewrites only the manifests of partitions
whose files or vectors changed, and lists the others again as they were.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic_core import to_json
from pyiceberg.avro.codecs import AVRO_CODEC_KEY, CODEC_MAPPING_ICEBERG_TO_AVRO
from pyiceberg.avro.file import (
    _SCHEMA_KEY,
    MAGIC,
    META_SCHEMA,
    SYNC_SIZE,
    AvroFileHeader,
    AvroOutputFile,
)
from pyiceberg.avro.resolver import construct_writer, resolve_writer
from pyiceberg.avro.writer import Writer
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from firn.catalog.orphans import PUBLISHED_DIR  # Firn's own sweep leaves it to us
from firn.io.storage import Storage

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(POS_ID)}),
    ]
)
METADATA_DIR = f"{PUBLISHED_DIR}/metadata"
DELETES_DIR = f"{PUBLISHED_DIR}/deletes"
COPIES_DIR = f"{PUBLISHED_DIR}/data"


def digest(parts: Iterable[str]) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    for part in sorted(parts):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def delete_file_name(vector_path: str) -> str:
    """A new position delete file for the deletion vector at ``vector_path`` (a new
    name each time: a file a retained snapshot reads is never overwritten)."""
    return f"{DELETES_DIR}/{digest([vector_path])}-{uuid.uuid4().hex[:12]}.parquet"


def write_position_deletes(
    storage: Storage,
    relative: str,
    uri: str,
    data_uri: str,
    positions: npt.NDArray[np.int64],
    partition: Record,
) -> DataFile:
    """Write the rows ``positions`` of ``data_uri`` hides as a position delete file."""
    rows = pa.table(
        [pa.array([data_uri] * len(positions), pa.string()), pa.array(positions, pa.int64())],
        schema=POSITION_DELETE_SCHEMA,
    )
    # Positions ascend: delta-encoded they take a few bits each; the one path, a
    # dictionary of one entry.
    sink = pa.BufferOutputStream()
    pq.write_table(
        rows,
        sink,
        compression="zstd",
        use_dictionary=["file_path"],
        column_encoding={"pos": "DELTA_BINARY_PACKED"},
    )
    data = sink.getvalue()
    with storage.open_output(relative) as out:
        out.write(data)
    size = int(data.size)
    bound = data_uri.encode()
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=len(positions),
        file_size_in_bytes=size,
        lower_bounds={FILE_PATH_ID: bound},
        upper_bounds={FILE_PATH_ID: bound},
    )


def copy_name(data_path: str, vector_path: str | None) -> str:
    """A new published copy of a base file (with its vector applied)."""
    return f"{COPIES_DIR}/{digest([data_path, vector_path or ''])}-{uuid.uuid4().hex[:12]}.parquet"


def data_file(
    uri: str,
    partition: Record,
    records: int,
    size: int,
    bounds: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {}),
) -> DataFile:
    """A Firn base file, referenced in place, with column ``bounds`` (lower, upper)."""
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=records,
        file_size_in_bytes=size,
        lower_bounds=bounds[0] or None,
        upper_bounds=bounds[1] or None,
    )


@dataclass(frozen=True)
class _AvroShape:
    """What pyiceberg derives from a table's schema and partition spec for each
    manifest it writes (the entry schemas, their Avro writer and the header's Avro
    schema): built once per shape here, since building it was most of the cost of
    writing a small manifest (a publication writes one or two a changed partition)."""

    file_schema: Schema
    writer: Writer
    avro_schema: str
    schema_json: str
    spec_json: str


@functools.lru_cache(maxsize=256)
def _avro_shape(
    writer_class: type[ManifestWriterV2], schema_json: str, spec_json: str
) -> _AvroShape:
    schema = Schema.model_validate_json(schema_json)
    spec = PartitionSpec.model_validate_json(spec_json)
    probe = writer_class.__new__(writer_class)
    probe._spec, probe._schema = spec, schema
    file_schema = probe._with_partition(probe.version)
    record_schema = probe._with_partition(DEFAULT_READ_VERSION)
    avro = AvroSchemaConversion().iceberg_to_avro(file_schema, schema_name="manifest_entry")
    return _AvroShape(
        file_schema,
        resolve_writer(record_schema=record_schema, file_schema=file_schema),
        json.dumps(avro),
        schema_json,
        to_json(spec.fields).decode("utf-8"),
    )


_META_WRITER = construct_writer(META_SCHEMA)


class _ShapedOutputFile(AvroOutputFile[ManifestEntry]):
    """pyiceberg's Avro output file, its writer and header schema taken from a shape
    built before (the file written is byte for byte what pyiceberg would write, bar
    the random sync marker)."""

    def __init__(self, output_file: OutputFile, shape: _AvroShape, metadata: dict[str, str]):
        self.output_file = output_file
        self.file_schema = shape.file_schema
        self.schema_name = "manifest_entry"
        self.sync_bytes = os.urandom(SYNC_SIZE)
        self.writer = shape.writer
        self.metadata = metadata
        self._avro_schema = shape.avro_schema

    def _write_header(self) -> None:
        codec = self.metadata[AVRO_CODEC_KEY]
        codec = CODEC_MAPPING_ICEBERG_TO_AVRO.get(codec, codec)
        meta = {**self.metadata, _SCHEMA_KEY: self._avro_schema, AVRO_CODEC_KEY: codec}
        _META_WRITER.write(self.encoder, AvroFileHeader(MAGIC, meta, self.sync_bytes))


class _DataManifestWriter(ManifestWriterV2):
    """pyiceberg's version-2 manifest writer, its Avro shape built once per table
    schema and partition spec (``_avro_shape``)."""

    def _shape(self) -> _AvroShape:
        return _avro_shape(type(self), self._schema.model_dump_json(), self._spec.model_dump_json())

    @property
    def _meta(self) -> dict[str, str]:
        shape = self._shape()
        return {
            "schema": shape.schema_json,
            "partition-spec": shape.spec_json,
            "partition-spec-id": str(self._spec.spec_id),
            "format-version": str(self.version),
            AVRO_CODEC_KEY: self._compression,
            "content": "data",
        }

    def new_writer(self) -> Any:
        return _ShapedOutputFile(self._output_file, self._shape(), self._meta)


class _DeleteManifestWriter(_DataManifestWriter):
    """pyiceberg writes data manifests only; a delete manifest differs in its content."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


@dataclass(frozen=True)
class ManifestName:
    """What a manifest's name says: its partition, content and digest."""

    partition: str
    content: str
    """``d`` data, ``x`` deletes."""
    digest: str

    def stem(self) -> str:
        return f"p{self.partition}-{self.content}{self.digest}"

    @classmethod
    def parse(cls, location: str) -> ManifestName | None:
        name = location.rsplit("/", 1)[-1]
        parts = name.split("-")
        if len(parts) < 3 or not parts[0].startswith("p") or parts[1][:1] not in ("d", "x"):
            return None
        return cls(parts[0][1:], parts[1][:1], parts[1][1:])


def partition_tag(partition_key: str) -> str:
    return digest([partition_key])[:12]


def write_manifest(
    io: FileIO,
    path: str,
    spec: PartitionSpec,
    schema: Schema,
    snapshot_id: int,
    added: list[DataFile],
    existing: list[ManifestEntry],
    deleted: list[ManifestEntry],
) -> ManifestFile:
    """One partition's manifest: new files, files listed before (keeping their
    sequence numbers, which decide which deletes apply to them) and the files this
    snapshot removes."""
    name = ManifestName.parse(path)
    kind = (
        _DeleteManifestWriter if name is not None and name.content == "x" else _DataManifestWriter
    )
    writer = kind(spec, schema, io.new_output(path), snapshot_id, "deflate")
    with writer:
        for file in added:
            writer.add(ManifestEntry.from_args(data_file=file, snapshot_id=snapshot_id))
        for entry in existing:
            writer.existing(entry)
        for entry in deleted:
            writer.delete(entry)
    return writer.to_manifest_file()
