"""Every table property is bounded to values that work end to end, and the property
reference lists the same ranges as the code."""

from __future__ import annotations

import logging
import math
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firn.errors import ConfigError
from firn.model.files import CODECS, DEFAULT_CODEC
from firn.model.properties import DAY, RANGES, Codec, GiB, KiB, MiB, TableProperties, TiB
from firn.model.property_docs import PROPERTY_DOCS, property_names
from firn.units import parse_duration, parse_size


def companions(name: str, value: float) -> dict[str, Any]:
    """The other properties ``value`` needs to satisfy the pair rules."""
    if name.endswith(".buckets"):
        return {"change.buckets": value, "base.buckets": value}
    if name == "small-file-bytes":
        return {name: value, "target-file-size": 16 * GiB}
    if name == "major.delete-bytes-lowest":
        return {name: value, "major.delete-bytes": TiB}
    if name == "major.delete-bytes":
        return {name: value, "major.delete-bytes-lowest": 1}
    return {name: value}


def typed(name: str, value: float) -> float | int:
    return int(value) if RANGES[name].unit in ("count", "bytes") else value


@pytest.mark.parametrize("name", sorted(RANGES))
def test_both_ends_of_every_range_are_accepted(name: str) -> None:
    bounds = RANGES[name]
    ends = [bounds.high] if bounds.above else [bounds.low, bounds.high]
    for value in ends:
        TableProperties.parse(companions(name, typed(name, value)))


@pytest.mark.parametrize("name", sorted(RANGES))
def test_values_past_either_end_are_refused_naming_the_property_and_range(name: str) -> None:
    bounds = RANGES[name]
    below = bounds.low if bounds.above else bounds.low - 1
    for value in (below, bounds.high * 2, bounds.high + 1):
        with pytest.raises(ConfigError) as refused:
            TableProperties.parse(companions(name, typed(name, value)))
        assert f"{name}: must be {bounds.describe()}" in str(refused.value)
        assert refused.value.retryable is False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"snapshot.retention": 1e12}, "snapshot.retention: must be from 0s to 36500d"),
        ({"orphan.retention": "36501d"}, "orphan.retention: must be from 0s to 36500d"),
        ({"target-file-size": 4}, "target-file-size: must be from 1KiB to 16GiB, got 4B"),
        ({"change.buckets": 1, "base.buckets": 65536}, "base.buckets: must be from 1 to 1024"),
        ({"change.buckets": 1, "base.buckets": 32}, "within a factor of 16"),
        ({"change.buckets": 512, "base.buckets": 4}, "within a factor of 16"),
        ({"small-file-bytes": "65MiB"}, "small-file-bytes (65MiB) must be at most half"),
        ({"target-file-size": "1KiB", "small-file-bytes": 513}, "at most half"),
        ({"major.delete-bytes-lowest": "65MiB"}, "at most major.delete-bytes"),
        ({"task.lease": "1s"}, "task.lease: must be from 3s to 1d"),
        ({"major.delete-ratio": math.inf}, "major.delete-ratio: Input should be a finite"),
        ({"major.change-ratio": math.nan}, "major.change-ratio: Input should be a finite"),
        ({"major.interval-max": math.inf}, "major.interval-max: Input should be a finite"),
        ({"task.max-attempts": True}, "task.max-attempts: must be a number, not a boolean"),
        ({"task.lease": True}, "task.lease: must be a duration, not a boolean"),
        ({"task.max-bytes": False}, "task.max-bytes: must be a size, not a boolean"),
        ({"major.file-count": 10**30}, "major.file-count: must be from 1 to 10000"),
        ({"snapshot.retention": "1e12"}, "not a duration"),
        ({"snapshot.retention": "1h; drop"}, "not a duration"),
        ({"target-file-size": "1KiB\n2"}, "not a size"),
        ({"change.buckets": 2.5}, "change.buckets"),
    ],
)
def test_the_issue_examples_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        TableProperties.parse(values)
    assert message in str(refused.value)


def test_a_ratio_rule_is_checked_on_the_merged_properties() -> None:
    props = TableProperties.parse({"change.buckets": 2, "base.buckets": 2})
    with pytest.raises(ConfigError, match="within a factor of 16"):
        props.merged({"base.buckets": 64})
    assert props.merged({"base.buckets": 64, "change.buckets": 8}).base_buckets == 64
    with pytest.raises(ConfigError, match="must be a dict"):
        props.merged([("base.buckets", 8)])  # type: ignore[arg-type]


def test_the_default_small_file_threshold_is_never_zero() -> None:
    smallest = TableProperties.parse({"target-file-size": RANGES["target-file-size"].low})
    assert smallest.small_file_threshold >= 1
    assert smallest.vector_min_file_bytes >= 1


def test_deletion_vectors_reach_below_the_small_file_limit_unless_told() -> None:
    demo = TableProperties.parse({"target-file-size": "8MiB"})
    assert (demo.small_file_threshold, demo.vector_min_file_bytes) == (MiB, 8 * KiB)
    given_small = TableProperties.parse({"small-file-bytes": "4MiB"})
    assert given_small.vector_min_file_bytes == 32 * KiB
    told = TableProperties.parse({"deletion-vectors.min-file-bytes": "2MiB"})
    assert told.vector_min_file_bytes == 2 * MiB


@given(st.floats(min_value=0, max_value=36500 * DAY))
def test_every_retention_in_range_is_accepted(seconds: float) -> None:
    assert TableProperties.parse({"snapshot.retention": seconds}).snapshot_retention == seconds


@given(
    st.floats(min_value=36500 * DAY, exclude_min=True) | st.floats(max_value=0, exclude_max=True)
)
def test_every_retention_out_of_range_is_refused(seconds: float) -> None:
    with pytest.raises(ConfigError, match=r"snapshot\.retention"):
        TableProperties.parse({"snapshot.retention": seconds})


@given(st.integers(), st.integers())
def test_bucket_pairs_are_accepted_exactly_when_both_rules_hold(change: int, base: int) -> None:
    def level(n: int) -> bool:
        return 1 <= n <= 1024 and n & (n - 1) == 0

    ok = level(change) and level(base) and max(change, base) <= 16 * min(change, base)
    values = {"change.buckets": change, "base.buckets": base}
    if ok:
        assert TableProperties.parse(values).base_buckets == base
    else:
        with pytest.raises(ConfigError):
            TableProperties.parse(values)


def test_stored_values_out_of_range_are_read_as_the_nearest_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stored = {
        "change.buckets": 1,
        "base.buckets": 65536,
        "target-file-size": 4,
        "small-file-bytes": 1 * MiB,
        "snapshot.retention": 1e12,
    }
    with caplog.at_level(logging.WARNING):
        props = TableProperties.from_catalog(stored, "old")
    assert (props.change_buckets, props.base_buckets) == (1, 16)
    assert props.target_file_size == KiB
    assert props.small_file_bytes == KiB // 2
    assert props.snapshot_retention == 36500 * DAY
    assert "table old: stored properties read as" in caplog.text
    # In-range stored values are read as they are, without a warning.
    caplog.clear()
    assert TableProperties.from_catalog(props.as_dict(), "old") == props
    assert caplog.text == ""


def test_units_match_the_whole_string() -> None:
    assert parse_size(" 1.5 KiB ") == 1536
    assert parse_duration("2min") == 120.0
    for bad in ("1KiB\n1", "1 KB", "KiB", "1e3"):
        with pytest.raises(ValueError, match="not a size"):
            parse_size(bad)
    for bad in ("1h\nx", "1 hour", "-1s", "1e12"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)


def test_the_reference_lists_every_property_with_its_range() -> None:
    assert sorted(PROPERTY_DOCS) == sorted(property_names()), "every property, once"
    listed = {name: allowed for name, (_default, allowed) in PROPERTY_DOCS.items()}
    assert set(RANGES) <= set(listed)
    for name, bounds in RANGES.items():
        low = f"above {bounds.text(bounds.low)}" if bounds.above else bounds.text(bounds.low)
        assert f"{low} to {bounds.text(bounds.high)}" in listed[name], name


def test_the_reference_gives_each_default_the_model_has() -> None:
    defaults = TableProperties()
    for name, (default, _allowed) in PROPERTY_DOCS.items():
        if "/" in default or default == "none":
            continue  # derived from another property, or unset
        field = next(n for n, f in TableProperties.model_fields.items() if f.alias == name)
        written = TableProperties.parse({name: default} | companions(name, default))
        assert getattr(written, field) == getattr(defaults, field), name


def test_the_codecs_a_table_may_name_are_those_a_task_spec_takes() -> None:
    assert get_args(Codec) == CODECS
    assert TableProperties().file_compression == DEFAULT_CODEC
    for codec in CODECS:
        assert TableProperties.parse({"file.compression": codec}).file_compression == codec
    for bad in ("gzip", "LZ4", "", 4):
        with pytest.raises(ConfigError, match=r"file\.compression"):
            TableProperties.parse({"file.compression": bad})
