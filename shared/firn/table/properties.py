"""Table properties (SPEC 8): typed, validated, with the documented defaults.

Users pass them as a flat dict with the SPEC's dotted names, e.g.
``{"change.buckets": 8, "target-file-size": "64MiB"}``; sizes accept a number of bytes
or a string with a KiB/MiB/GiB suffix, durations a number of seconds or a string with
an s/min/h/d suffix.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from firn.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|h|d)?\s*$")
_DURATION_UNITS = {None: 1, "s": 1, "min": 60, "h": 3600, "d": 86400}
MiB = 2**20


def _bytes(value: Any) -> Any:
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(f"not a size: {value!r} (use bytes or e.g. '128MiB')")
        return int(float(match[1]) * _SIZE_UNITS[match[2]])
    return value


def _seconds(value: Any) -> Any:
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '1h')")
        return float(match[1]) * _DURATION_UNITS[match[2]]
    return value


def _power_of_two(value: int) -> int:
    if value <= 0 or value & (value - 1):
        raise ValueError(f"must be a power of two, got {value}")
    return value


Bytes = Annotated[int, BeforeValidator(_bytes), Field(gt=0)]
Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0)]
Retention = Annotated[float, BeforeValidator(_seconds), Field(ge=0)]
"""A duration that may be 0: keep nothing beyond what the current snapshot reads."""
Buckets = Annotated[int, Field(ge=1, le=1 << 16)]


class TableProperties(BaseModel):
    """Per-table settings; names and defaults as in SPEC 8."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    change_buckets: Buckets = Field(
        4, alias="change.buckets", description="tree level change files are written at"
    )
    base_buckets: Buckets = Field(
        4, alias="base.buckets", description="tree level base files are written at"
    )
    target_file_size: Bytes = Field(
        128 * MiB, alias="target-file-size", description="size base files are cut at"
    )
    small_file_bytes: Bytes | None = Field(
        None, alias="small-file-bytes", description="default target-file-size / 8"
    )
    major_file_count: int = Field(12, ge=1, alias="major.file-count")
    major_delete_ratio: float = Field(0.1, gt=0, alias="major.delete-ratio")
    major_delete_bytes_lowest: Bytes = Field(1 * MiB, alias="major.delete-bytes-lowest")
    major_delete_bytes: Bytes = Field(64 * MiB, alias="major.delete-bytes")
    major_change_ratio: float = Field(0.3, gt=0, alias="major.change-ratio")
    major_interval_max: Seconds = Field(3600.0, alias="major.interval-max")
    minor_file_count: int = Field(5, ge=1, alias="minor.file-count")
    task_max_bytes: Bytes = Field(512 * MiB, alias="task.max-bytes")
    task_max_attempts: int = Field(5, ge=1, alias="task.max-attempts")
    task_lease: Seconds = Field(60.0, alias="task.lease")
    snapshot_retention: Retention = Field(
        12 * 3600.0, alias="snapshot.retention", description="how long old snapshots stay readable"
    )
    orphan_retention: Retention = Field(
        2 * 86400.0, alias="orphan.retention", description="how long unreferenced files are kept"
    )

    @field_validator("change_buckets", "base_buckets")
    @classmethod
    def _tree_level(cls, value: int) -> int:
        return _power_of_two(value)

    @property
    def small_file_threshold(self) -> int:
        return self.small_file_bytes or self.target_file_size // 8

    @classmethod
    def parse(cls, values: dict[str, Any] | None) -> TableProperties:
        """Validate user-given properties; ``ConfigError`` names every bad one."""
        try:
            return cls.model_validate(values or {})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'properties'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ConfigError(f"bad table properties: {problems}") from exc

    def merged(self, updates: dict[str, Any]) -> TableProperties:
        """These properties with ``updates`` (dotted names) applied and re-validated."""
        return self.parse({**self.as_dict(), **updates})

    def as_dict(self) -> dict[str, Any]:
        """The dotted-name form, as stored in the catalog."""
        return self.model_dump(by_alias=True, exclude_none=True)
