"""Naming the partitions to compact: ``firn.compact``'s key or mapping, checked
against the partitions the table has, and the CLI's repeated or comma-separated
``--partition`` options."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest

from firn.api.compact import existing_partitions
from firn.commands.compact import partition_options
from firn.errors import ConfigError
from firn.model.schema import TableSchema

EVENTS = TableSchema.build(
    "events",
    pa.schema(
        [
            pa.field("region", pa.string(), False),
            pa.field("day", pa.date32(), False),
            pa.field("id", pa.int64(), False),
        ]
    ),
    ["region", "day", "id"],
    ["region", "day"],
)
KNOWN = ["region=eu/day=2024-01-31", "region=us/day=2024-01-31"]


def test_a_key_and_a_mapping_name_the_same_partition() -> None:
    key = "region=eu/day=2024-01-31"
    for name in (
        key,
        {"region": "eu", "day": "2024-01-31"},
        {"day": datetime.date(2024, 1, 31), "region": "eu"},
    ):
        assert existing_partitions(EVENTS, name, KNOWN) == [key]
    assert existing_partitions(EVENTS, [key, {"region": "us", "day": "2024-01-31"}], KNOWN) == KNOWN


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ({"region": "eu"}, r"every partition column \['region', 'day'\]: 'day' is missing"),
        (
            {"region": "eu", "day": "2024-01-31", "id": 1},
            "'id' is not a partition column",
        ),
        (
            {"regoin": "eu", "day": "2024-01-31"},
            "'regoin' is not a partition column, 'region' is missing",
        ),
        ({"region": "eu", "day": "last tuesday"}, "'last tuesday' is not a date32"),
        ("region=eu", "must be written region=.../day=..."),
        ("day=2024-01-31/region=eu", "must be written region=.../day=..."),
        ("region=eu/day=2024-02-01", "has no partition 'region=eu/day=2024-02-01'"),
        ({"region": "eu", "day": "2024-02-01"}, "has no partition 'region=eu/day=2024-02-01'"),
    ],
)
def test_a_bad_partition_name_is_a_config_error(name: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        existing_partitions(EVENTS, name, KNOWN)  # type: ignore[arg-type]


def test_partition_options_repeated_or_comma_separated() -> None:
    assert partition_options(None) is None
    assert partition_options(["region=eu"]) == ["region=eu"]
    both = ["region=eu", "region=us"]
    assert partition_options(["region=eu", "region=us"]) == both
    assert partition_options(["region=eu, region=us"]) == both
    # A comma inside a value is percent-escaped in a key, so it never splits one.
    assert partition_options(["region=a%2Cb"]) == ["region=a%2Cb"]
    for bad in (["region=eu,"], [""]):
        with pytest.raises(ConfigError, match="--partition takes partition keys"):
            partition_options(bad)
