"""Validation at the door, on the real catalog: a refused create_table, commit or
property change leaves no catalog row, no directory and no file behind; the smallest
allowed sizes and the widest allowed bucket ratio work end to end; tables whose
stored properties predate the ranges keep working."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import firn
from firn.catalog.expiry import expire
from firn.errors import ConfigError
from firn.settings import FirnSettings
from tests.hash_tree import HASH_TREE

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("note", pa.string()),
    ]
)
_names = itertools.count()


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "warehouse"


@pytest.fixture
def catalog(settings: FirnSettings, warehouse: Path) -> Iterator[firn.Catalog]:
    with firn.connect(warehouse=str(warehouse), settings=settings) as catalog:
        yield catalog


def rows(region: str, ids: list[int], **columns: Any) -> pa.Table:
    data: dict[str, Any] = {
        "region": pa.array([region] * len(ids), pa.string()),
        "id": pa.array(ids, pa.int64()),
        "at": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us", tz="UTC")),
        "note": pa.array([f"n{i}" for i in ids], pa.string()),
    }
    data.update(columns)
    return pa.table(data)


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*")) if root.exists() else []


def catalog_rows(catalog: firn.Catalog) -> dict[str, int]:
    counts = {}
    for name in ("catalog_table", "catalog_partition", "snapshot", "data_file"):
        row = catalog.conn.execute(f"SELECT count(*) FROM {name}").fetchone()
        counts[name] = row[0] if row else -1
    return counts


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("abc\n-2", SCHEMA, ["region", "id"]), "table name"),
        (("abc\n", SCHEMA, ["region", "id"]), "table name"),
        (
            ("zoned", SCHEMA.append(pa.field("t", pa.timestamp("us", "Mars/Olympus"))), ["id"]),
            "unknown time zone",
        ),
        (("named", SCHEMA.append(pa.field("x\x00", pa.int64())), ["id"]), "control character"),
        (("ok", SCHEMA, ["id"], (), {"snapshot.retention": 1e12}), "snapshot.retention"),
        (("ok", SCHEMA, ["id"], (), {"target-file-size": 4}), "target-file-size"),
        (("ok", SCHEMA, ["id"], (), {"change.buckets": 1, "base.buckets": 65536}), "base.buckets"),
        (("ok", SCHEMA, ["id"], (), {"change.buckets": 1, "base.buckets": 32}), "factor of 16"),
        (("ok", SCHEMA, ["id"], (), {"major.delete-ratio": float("inf")}), "finite"),
    ],
)
def test_a_refused_create_table_writes_nothing(
    catalog: firn.Catalog, warehouse: Path, args: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        catalog.create_table(*args)
    assert refused.value.retryable is False
    assert catalog.tables() == []
    assert catalog_rows(catalog)["catalog_table"] == 0
    assert files_under(warehouse) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (rows("eu\x00x", [1]), "NUL"),
        (
            rows("eu", [1, 2], note=pa.array(["a", "b"])).set_column(
                0, "region", pa.array(["eu", "e\x00"])
            ),
            "NUL",
        ),
        (rows("r" * 300, [1]), "at most 200 bytes"),
        (rows("é" * 90, [1]), "percent-escaped"),
        (rows("eu", [1], at=pa.array([1_700_000_000_000_000], pa.int64())), "column 'at'"),
        (rows("eu", [1], at=pa.array([0], pa.timestamp("us"))), "column 'at'"),
        (rows("eu", [1], note=pa.array([5], pa.int64())), "column 'note'"),
        (rows("eu", [1], id=pa.array([1], pa.uint64())), "column 'id'"),
    ],
)
def test_a_refused_commit_writes_nothing(
    catalog: firn.Catalog, warehouse: Path, changes: pa.Table, message: str
) -> None:
    table = catalog.create_table(f"orders_{next(_names)}", SCHEMA, ["region", "id"], ["region"])
    before = catalog_rows(catalog)
    with pytest.raises(ConfigError, match=message) as refused:
        table.upsert(changes)
    assert refused.value.retryable is False
    assert catalog_rows(catalog) == before
    assert files_under(warehouse) == [], "no directory, no file"
    assert table.current_snapshot() == 0
    # Nothing was half-done: the next good commit is the table's first.
    assert table.upsert(rows("a/b", [1, 2])) == 1
    assert table.read().num_rows == 2
    assert table.files().column("path")[0].as_py().startswith("change/region=a%2Fb/")


def test_a_nul_in_a_string_key_of_a_delete_is_refused_too(catalog: firn.Catalog) -> None:
    table = catalog.create_table("keyed", SCHEMA, ["region", "id"])
    with pytest.raises(ConfigError, match="NUL"):
        table.delete(pa.table({"region": ["x\x00"], "id": pa.array([1], pa.int64())}))
    assert table.current_snapshot() == 0


def test_property_changes_are_checked_the_same_way_and_keep_the_old_values(
    catalog: firn.Catalog,
) -> None:
    table = catalog.create_table("tuned", SCHEMA, ["region", "id"])
    for updates in (
        {"snapshot.retention": 1e12},
        {"target-file-size": 4},
        {"base.buckets": 128},
        {"small-file-bytes": "100MiB"},
        {"task.lease": True},
    ):
        with pytest.raises(ConfigError):
            table.set_properties(updates)
    assert catalog.table("tuned").properties == table.properties
    assert table.set_properties({"base.buckets": 64, "change.buckets": 16}).base_buckets == 64
    assert catalog.table("tuned").properties.base_buckets == 64


def test_a_new_table_takes_the_settings_table_defaults_under_its_own_properties(
    settings: FirnSettings, warehouse: Path
) -> None:
    fleet = FirnSettings(
        **{
            **settings.model_dump(exclude={"table_defaults"}),
            "table_defaults": {"major.change-bytes-lowest": "256KiB", "minor.file-count": 8},
        }
    )
    with firn.connect(warehouse=str(warehouse), settings=settings) as plain:
        before = plain.create_table("made_before", SCHEMA, ["region", "id"])
    with firn.connect(warehouse=str(warehouse), settings=fleet) as catalog:
        small = catalog.create_table("small", SCHEMA, ["region", "id"])
        assert small.properties.minor_file_count == 8
        assert small.properties.major_change_bytes_lowest == 256 * 1024
        own = catalog.create_table(
            "own", SCHEMA, ["region", "id"], properties={"minor.file-count": 3}
        )
        assert own.properties.minor_file_count == 3  # its own property wins
        assert own.properties.major_change_bytes_lowest == 256 * 1024
        # Kept in the catalog, not applied at each read; tables made before keep theirs.
        assert catalog.table("small").properties == small.properties
        assert catalog.table("made_before").properties == before.properties
        assert before.properties.minor_file_count == 10  # the default


def test_stored_properties_out_of_range_do_not_break_expiry_or_status(
    catalog: firn.Catalog,
) -> None:
    table = catalog.create_table("legacy", SCHEMA, ["region", "id"])
    table.upsert(rows("eu", [1, 2, 3]))
    # As a table created before the ranges existed could have them.
    stored = {
        **table.properties.as_dict(),
        "snapshot.retention": 1e12,
        "target-file-size": 4,
        "change.buckets": 1,
        "base.buckets": 65536,
    }
    catalog.conn.execute(
        "UPDATE catalog_table SET properties = %s WHERE table_id = %s",
        (json.dumps(stored), table.table_id),
    )
    report = expire(catalog.conn)
    assert [t.table for t in report.tables] == ["legacy"]
    reopened = catalog.table("legacy")
    assert reopened.properties.base_buckets == 16
    (partition,) = reopened.status()["partitions"]
    assert partition["unmerged_files"] > 0
    assert partition["score"] > 0


def test_nul_in_a_looked_up_name_is_no_such_table(catalog: firn.Catalog) -> None:
    with pytest.raises(ConfigError, match="no table named"):
        catalog.table("a\x00b")
    with pytest.raises(ConfigError, match="no table named"):
        expire(catalog.conn, "a\x00b")


def test_the_smallest_sizes_and_widest_bucket_ratio_work_end_to_end(
    catalog: firn.Catalog,
) -> None:
    table = catalog.create_table(
        "tiny",
        SCHEMA,
        ["region", "id"],
        ["region"],
        {
            "change.buckets": 1,
            "base.buckets": 16,
            "target-file-size": "1KiB",
            "small-file-bytes": 1,
            "task.max-bytes": "1KiB",
            **HASH_TREE,
        },
    )
    table.upsert(rows("eu", list(range(200))))
    table.delete(pa.table({"region": ["eu"] * 50, "id": pa.array(range(0, 200, 4), pa.int64())}))
    status = table.status()
    assert status["partitions"][0]["score"] > 0
    summary = firn.compact(table, engine="local")
    assert [p["outcome"] for p in summary["plans"]] == ["committed"]
    assert summary["plans"][0]["tasks"] == 16
    view = table.read()
    assert sorted(view.column("id").to_pylist()) == [i for i in range(200) if i % 4]
    assert table.status()["partitions"][0]["unmerged_files"] == 0
