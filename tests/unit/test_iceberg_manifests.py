"""Manifests written with their Avro shape built once (``firn.iceberg.writing``) are the
files pyiceberg's own writer makes, byte for byte once the random sync marker is fixed,
however often a shape is reused, and read back as written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyiceberg.io import load_file_io
from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestWriterV2
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from firn.iceberg.writing import ManifestName, data_file, write_manifest

SCHEMA = Schema(
    NestedField(1, "region", StringType(), required=True),
    NestedField(2, "k", LongType(), required=True),
    NestedField(3, "note", StringType(), required=False),
    schema_id=3,
    identifier_field_ids=[1, 2],
)
SPEC = PartitionSpec(
    PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="region"),
    spec_id=0,
)
OTHER = Schema(NestedField(1, "region", StringType(), required=True), schema_id=0)


def _files(root: Path, n: int) -> list:
    return [
        data_file(f"file://{root}/f{i}.parquet", Record("eu"), 10 + i, 1000 + i) for i in range(n)
    ]


def _pyiceberg(io, path: str, files: list) -> bytes:
    with ManifestWriterV2(SPEC, SCHEMA, io.new_output(path), 7, "deflate") as writer:
        for f in files:
            writer.add(ManifestEntry.from_args(data_file=f, snapshot_id=7))
    return Path(path.removeprefix("file://")).read_bytes()


@pytest.fixture
def fixed_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: b"\x5a" * n)


@pytest.mark.usefixtures("fixed_sync")
def test_a_data_manifest_is_the_file_pyicebergs_writer_makes(tmp_path: Path) -> None:
    io = load_file_io({}, str(tmp_path))
    for round_, n in enumerate((3, 1, 5)):  # the shape built once, then reused
        files = _files(tmp_path, n)
        ours = f"file://{tmp_path}/{ManifestName('eu', 'd', f'r{round_}').stem()}-a.avro"
        manifest = write_manifest(io, ours, SPEC, SCHEMA, 7, files, [], [])
        theirs = _pyiceberg(io, f"file://{tmp_path}/theirs-{round_}.avro", files)
        assert Path(ours.removeprefix("file://")).read_bytes() == theirs
        assert manifest.added_files_count == n
        entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
        assert [e.data_file.file_path for e in entries] == [f.file_path for f in files]


@pytest.mark.usefixtures("fixed_sync")
def test_delete_manifests_and_other_schemas_keep_their_own_shape(tmp_path: Path) -> None:
    io = load_file_io({}, str(tmp_path))
    files = _files(tmp_path, 2)
    data = write_manifest(
        io, f"file://{tmp_path}/{ManifestName('eu', 'd', 'one').stem()}-a.avro",
        SPEC, SCHEMA, 7, files, [], [],
    )  # fmt: skip
    deletes = write_manifest(
        io, f"file://{tmp_path}/{ManifestName('eu', 'x', 'one').stem()}-a.avro",
        SPEC, SCHEMA, 7, files, [], [],
    )  # fmt: skip
    assert data.content == ManifestContent.DATA
    assert deletes.content == ManifestContent.DELETES
    other = write_manifest(
        io, f"file://{tmp_path}/{ManifestName('eu', 'd', 'two').stem()}-a.avro",
        SPEC, OTHER, 7, files, [], [],
    )  # fmt: skip
    header = Path(other.manifest_path.removeprefix("file://")).read_bytes()
    assert b'"note"' not in header  # the other table's schema, not a cached one
    assert b'"note"' in Path(data.manifest_path.removeprefix("file://")).read_bytes()
    assert len(other.fetch_manifest_entry(io)) == 2
