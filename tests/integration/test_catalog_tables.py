"""Creating, finding and listing tables in the real Postgres catalog."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from firn.api.catalog import Catalog, connect
from firn.errors import ConfigError
from firn.settings import FirnSettings

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture
def catalog(settings: FirnSettings, tmp_path: object) -> Iterator[Catalog]:
    with connect(warehouse=str(tmp_path), settings=settings) as cat:
        yield cat


def test_created_tables_are_found_and_listed(catalog: Catalog) -> None:
    created = catalog.create_table("orders", SCHEMA, ["id"], properties={"change.buckets": 8})
    catalog.create_table("alpha", SCHEMA, ["id"])
    found = catalog.table("orders")
    assert found.table_id == created.table_id
    assert found.schema.equals(SCHEMA)
    assert found.location == created.location
    assert found.location.endswith(f"/orders-{created.table_id}")
    assert found.properties.change_buckets == 8
    assert catalog.tables() == ["alpha", "orders"]


def test_duplicate_names_and_bad_input_write_nothing(catalog: Catalog) -> None:
    catalog.create_table("orders", SCHEMA, ["id"])
    with pytest.raises(ConfigError, match="already exists"):
        catalog.create_table("orders", SCHEMA, ["id"])
    with pytest.raises(ConfigError, match="power of two"):
        catalog.create_table("other", SCHEMA, ["id"], properties={"base.buckets": 6})
    with pytest.raises(ConfigError, match="non-nullable"):
        catalog.create_table("other", SCHEMA, ["v"])
    assert catalog.tables() == ["orders"]
    with pytest.raises(ConfigError, match="no table named"):
        catalog.table("other")
