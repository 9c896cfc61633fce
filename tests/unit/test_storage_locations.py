"""Warehouse locations: local paths made absolute, URIs (s3://) taken as given."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from firn.errors import ConfigError
from firn.io.storage import Storage, join_location, resolve_root, warehouse_root


def test_local_paths_become_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_root("wh") == str(tmp_path / "wh")
    assert join_location(resolve_root("wh"), "orders-1") == f"{tmp_path}/wh/orders-1"


def test_s3_warehouses_are_accepted_with_their_options() -> None:
    root = "s3://lake/firn?region=eu-west-1&endpoint_override=127.0.0.1:9000&scheme=http"
    location = join_location(resolve_root(root), "orders-7")
    assert location == (
        "s3://lake/firn/orders-7?region=eu-west-1&endpoint_override=127.0.0.1:9000&scheme=http"
    )
    storage = Storage(location)  # builds the S3 file system; no request is made yet
    assert storage.fs.type_name == "s3"
    assert storage.full_path("change/I-1.parquet") == "lake/firn/orders-7/change/I-1.parquet"


def test_unusable_locations_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="empty"):
        resolve_root("")
    with pytest.raises(ConfigError, match="cannot use"):
        Storage("nosuchscheme://x/y")


@pytest.mark.parametrize(
    "uri",
    [
        "s3://lake/firn?region=eu-west-1&access_key=AKID&secret_key=s3cr3t-value",
        "s3://lake/firn?SECRET_KEY=s3cr3t-value",
        "s3://lake/firn?session_token=s3cr3t-value",
        "hdfs://firn:s3cr3t-value@namenode:8020/lake",
    ],
)
def test_a_warehouse_carrying_credentials_is_refused_without_showing_them(uri: str) -> None:
    with pytest.raises(ConfigError, match="carries credentials") as refused:
        warehouse_root(uri)
    assert "s3cr3t-value" not in str(refused.value)
    assert "AWS_SECRET_ACCESS_KEY" in str(refused.value)


def test_a_warehouse_without_credentials_is_kept_as_given() -> None:
    uri = "s3://lake/firn?region=eu-west-1&endpoint_override=127.0.0.1:9000"
    assert warehouse_root(uri) == uri
    assert warehouse_root("hdfs://firn@namenode:8020/lake/") == "hdfs://firn@namenode:8020/lake"


def test_files_are_written_into_directories_made_on_demand(tmp_path: Path) -> None:
    """A write creates its directory only when missing; a directory removed between
    two writes (an operator's cleanup) is made again, and neither write is lost."""
    storage = Storage(str(tmp_path / "warehouse"))
    rows = pa.table({"id": [1, 2, 3]})
    storage.write_parquet("change/p=1/a.parquet", rows)
    storage.write_parquet("change/p=1/b.parquet", rows)
    storage.delete_dir("change/p=1")
    storage.write_parquet("change/p=1/c.parquet", rows)
    with storage.open_output("base/p=2/d.bin") as out:
        out.write(b"firn")
    assert storage.read_parquet("change/p=1/c.parquet").equals(rows)
    assert not storage.exists("change/p=1/a.parquet")
    assert (tmp_path / "warehouse" / "base" / "p=2" / "d.bin").read_bytes() == b"firn"
