"""Table locations as Spark's Hadoop file systems name them (``firn.spark.hadoop``)."""

from __future__ import annotations

import pytest

from firn.spark.hadoop import hadoop_scheme, hadoop_uri, reaches


def test_a_local_path_is_a_file_uri() -> None:
    assert (
        hadoop_uri("/w/orders-3", "base/B-1-0.parquet") == "file:///w/orders-3/base/B-1-0.parquet"
    )
    assert hadoop_uri("file:///w/orders-3/", "x.parquet") == "file:///w/orders-3/x.parquet"
    assert hadoop_uri("/w/orders-3", "") == "file:///w/orders-3"
    assert hadoop_scheme("/w/orders-3") == "file"


def test_s3_is_read_through_s3a_without_pyarrows_options() -> None:
    location = "s3://lake/firn/orders-7?region=us-east-1&scheme=http&endpoint_override=h:9"
    assert hadoop_uri(location, "load/ab/B-4-1.parquet") == (
        "s3a://lake/firn/orders-7/load/ab/B-4-1.parquet"
    )
    assert hadoop_scheme(location) == "s3a"


@pytest.mark.parametrize(
    ("location", "scheme", "uri"),
    [
        ("gs://bucket/t", "gs", "gs://bucket/t/f.parquet"),
        ("gcs://bucket/t", "gs", "gs://bucket/t/f.parquet"),
        ("hdfs://nn:8020/w/t", "hdfs", "hdfs://nn:8020/w/t/f.parquet"),
        (
            "abfss://c@acct.dfs.core.windows.net/t",
            "abfss",
            "abfss://c@acct.dfs.core.windows.net/t/f.parquet",
        ),
        ("ftp://host/t", None, "ftp://host/t/f.parquet"),
    ],
)
def test_other_stores_keep_or_map_their_scheme(location: str, scheme: str | None, uri: str) -> None:
    assert hadoop_scheme(location) == scheme
    assert hadoop_uri(location, "f.parquet") == uri


class _NoJvm:
    """A session this process does not drive (Spark Connect): no ``_jvm``."""


def test_a_session_without_a_jvm_reaches_local_files_alone() -> None:
    session = _NoJvm()
    assert reaches(session, "/w/t")  # type: ignore[arg-type]
    assert not reaches(session, "s3://lake/t")  # type: ignore[arg-type]
    assert not reaches(session, "ftp://host/t")  # type: ignore[arg-type]
