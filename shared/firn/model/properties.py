"""Table properties (design §8): typed, bounded, with the documented defaults.

Users pass them as a flat dict with the dotted names of design §8, e.g.
``{"change.buckets": 8, "target-file-size": "64MiB"}``; sizes accept a number of bytes
or a string with a KiB/MiB/GiB suffix, durations a number of seconds or a string with
an s/min/h/d suffix (``firn.units``).

Every property has a range (``RANGES``, listed in docs/reference/properties.md) chosen so that any
value inside it works end to end: retentions fit a Postgres timestamp, a file size
cannot round the small-file threshold down to zero, a bucket count cannot make one
small commit plan thousands of tasks. A few rules tie two properties together
(``_pairs``). Values outside are refused with ``ConfigError`` naming the property and
its range, however they arrive: ``create_table``, ``set_properties``, the CLI.

Tables created before a bound existed may hold a value outside it; ``from_catalog``
reads such a value as the nearest one allowed (with a warning) rather than making
the table unusable for the services.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from firn.errors import ConfigError
from firn.model.windows import Window
from firn.units import (
    format_duration,
    format_size,
    not_boolean,
    parse_duration,
    parse_size,
)

if TYPE_CHECKING:
    from firn.model.schema import TableSchema

log = logging.getLogger(__name__)

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
DAY = 86400.0
MAX_BUCKET_RATIO = 16
"""base.buckets and change.buckets stay within this factor of each other: a change
file at a shallow node is read by every base node under it, so one small commit at
``change.buckets = 1`` with ``base.buckets = 65536`` would plan 65,536 tasks."""


@dataclass(frozen=True)
class Range:
    """The values a property may take, inclusive unless ``above`` (exclusive low)."""

    low: float
    high: float
    unit: Literal["count", "bytes", "seconds", "ratio"]
    above: bool = False

    def text(self, value: float) -> str:
        if self.unit == "bytes":
            return format_size(value)
        if self.unit == "seconds":
            return format_duration(value)
        return f"{value:g}"

    def describe(self) -> str:
        low = f"above {self.text(self.low)}" if self.above else f"from {self.text(self.low)}"
        return f"{low} to {self.text(self.high)}"

    def contains(self, value: float) -> bool:
        low_ok = value > self.low if self.above else value >= self.low
        return low_ok and value <= self.high

    def clamp(self, value: float) -> float:
        return min(max(value, self.low), self.high)


RANGES: dict[str, Range] = {
    "change.buckets": Range(1, 1024, "count"),
    "change.split-rows": Range(0, 100_000, "count"),
    "base.buckets": Range(1, 1024, "count"),
    "base.split-bytes": Range(0, TiB, "bytes"),
    "target-file-size": Range(KiB, 16 * GiB, "bytes"),
    "small-file-bytes": Range(1, 8 * GiB, "bytes"),
    "major.file-count": Range(1, 10_000, "count"),
    "major.delete-ratio": Range(0, 100, "ratio", above=True),
    "major.delete-bytes-lowest": Range(1, TiB, "bytes"),
    "major.delete-bytes": Range(1, TiB, "bytes"),
    "major.change-ratio": Range(0, 1000, "ratio", above=True),
    "major.change-bytes-lowest": Range(0, TiB, "bytes"),
    "major.interval-max": Range(1, 365 * DAY, "seconds"),
    "minor.file-count": Range(1, 10_000, "count"),
    "minor.size-ratio": Range(0, 100, "ratio"),
    "write.stall-runs": Range(0, 10_000, "count"),
    "deletion-vectors.max-ratio": Range(0, 1, "ratio"),
    "deletion-vectors.min-file-bytes": Range(1, 8 * GiB, "bytes"),
    "compaction.quota": Range(0, 10_000, "ratio", above=True),
    "compaction.gather-partitions": Range(1, 1_000, "count"),
    "compaction.vertical.min-columns": Range(0, 100_000, "count"),
    "compaction.vertical.group-columns": Range(1, 100_000, "count"),
    "schema.rewrite-ratio": Range(0, 100, "ratio"),
    "task.max-bytes": Range(KiB, TiB, "bytes"),
    "task.max-attempts": Range(1, 100, "count"),
    "task.lease": Range(3, DAY, "seconds"),
    # now() minus the retention must stay a Postgres timestamp (4713 BC at the
    # earliest): 1e12 s would not. A century is "keep everything" in practice.
    "snapshot.retention": Range(0, 36500 * DAY, "seconds"),
    "orphan.retention": Range(0, 36500 * DAY, "seconds"),
    "iceberg.snapshot-retention": Range(0, 36500 * DAY, "seconds"),
}
"""Every property's range; the property reference lists the same (a unit test compares them)."""

# Properties take their bounds from RANGES, so that a refusal states the range.
_Size = Annotated[int, BeforeValidator(parse_size)]
_Duration = Annotated[float, BeforeValidator(parse_duration)]
_Count = Annotated[int, BeforeValidator(not_boolean)]
_Ratio = Annotated[float, BeforeValidator(not_boolean)]

Codec = Literal["lz4", "zstd", "snappy"]
"""``file.compression``: one of ``firn.model.files.CODECS``."""


class TableProperties(BaseModel):
    """Per-table settings; names and defaults as in design §8, ranges in ``RANGES``."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False
    )

    change_buckets: _Count = Field(
        4, alias="change.buckets", description="tree level change files are written at"
    )
    change_split_rows: _Count = Field(
        1000,
        alias="change.split-rows",
        description="a commit's rows in a partition below this go to one file per "
        "operation at the partition's root node, not one per change node (0: always split)",
    )
    base_buckets: _Count = Field(
        4, alias="base.buckets", description="tree level base files are written at"
    )
    base_split_bytes: _Size = Field(
        MiB,
        alias="base.split-bytes",
        description="a partition whose base and unmerged changes hold fewer bytes than "
        "this keeps its base at the root node: one file, one compaction task "
        "(0: always at base.buckets)",
    )
    target_file_size: _Size = Field(
        128 * MiB, alias="target-file-size", description="size base files are cut at"
    )
    file_compression: Codec = Field(
        "lz4",
        alias="file.compression",
        description="codec of the Parquet files compaction and loads write",
    )
    small_file_bytes: _Size | None = Field(
        None, alias="small-file-bytes", description="default target-file-size / 8"
    )
    major_file_count: _Count = Field(12, alias="major.file-count")
    major_delete_ratio: _Ratio = Field(0.1, alias="major.delete-ratio")
    major_delete_bytes_lowest: _Size = Field(1 * MiB, alias="major.delete-bytes-lowest")
    major_delete_bytes: _Size = Field(64 * MiB, alias="major.delete-bytes")
    major_change_ratio: _Ratio = Field(0.3, alias="major.change-ratio")
    major_change_bytes_lowest: _Size = Field(
        64 * KiB,
        alias="major.change-bytes-lowest",
        description="unmerged bytes per base node below which the change-ratio and "
        "first-fold rules wait for minor.file-count sorted runs",
    )
    major_interval_max: _Duration = Field(3600.0, alias="major.interval-max")
    minor_file_count: _Count = Field(
        10, alias="minor.file-count", description="sorted runs per node that start a merge"
    )
    minor_size_ratio: _Ratio = Field(
        0.01, alias="minor.size-ratio", description="how much larger a run may be to merge"
    )
    major_window: str | None = Field(
        None,
        alias="compaction.major-window",
        description="daily window for the services' folds, e.g. '01:00-05:00' (UTC)",
    )
    write_stall_runs: _Count = Field(
        20, alias="write.stall-runs", description="sorted runs of a node that stall writers"
    )
    deletion_vector_ratio: _Ratio = Field(
        0.3,
        alias="deletion-vectors.max-ratio",
        description="share of a base file's rows a fold may hide with a deletion vector "
        "instead of rewriting the file; 0 turns deletion vectors off",
    )
    deletion_vector_min_bytes: _Size | None = Field(
        None,
        alias="deletion-vectors.min-file-bytes",
        description="smallest base file a fold keeps with a deletion vector; "
        "default small-file-bytes / 128",
    )
    compaction_quota: _Ratio = Field(
        0.5,
        alias="compaction.quota",
        description="executor slots the table may keep busy on average (over 5 min) "
        "before other tables' work goes first",
    )
    gather_partitions: _Count = Field(
        8,
        alias="compaction.gather-partitions",
        description="partitions one plan request of the services plans at once: its own "
        "and the table's other due ones, most in need first (their plans run and commit "
        "together); 1 plans only the request's",
    )
    vertical_min_columns: _Count = Field(
        32,
        alias="compaction.vertical.min-columns",
        description="value columns from which a major merge runs column group by column "
        "group (keys first, then each group in their order); 0: always row by row",
    )
    vertical_group_columns: _Count = Field(
        8,
        alias="compaction.vertical.group-columns",
        description="value columns a vertical merge reads and writes at a time",
    )
    schema_rewrite_ratio: _Ratio = Field(
        1.0,
        alias="schema.rewrite-ratio",
        description="bytes of base files written under an older schema version that a "
        "partition's major plans rewrite into the current one, per byte they write for "
        "their changes since the change; 0: only as folds touch them",
    )
    schema_ignore_dropped: bool = Field(
        False,
        alias="schema.ignore-dropped-columns",
        description="commits may still send columns the table dropped (they are ignored) "
        "instead of being refused",
    )
    task_max_bytes: _Size = Field(512 * MiB, alias="task.max-bytes")
    task_max_attempts: _Count = Field(5, alias="task.max-attempts")
    task_lease: _Duration = Field(60.0, alias="task.lease")
    snapshot_retention: _Duration = Field(
        12 * 3600.0, alias="snapshot.retention", description="how long old snapshots stay readable"
    )
    orphan_retention: _Duration = Field(
        2 * 86400.0, alias="orphan.retention", description="how long unreferenced files are kept"
    )
    iceberg_publish: bool = Field(
        True,
        alias="iceberg.publish",
        description="publish the table as an Apache Iceberg table other engines read",
    )
    iceberg_snapshot_retention: _Duration = Field(
        3600.0,
        alias="iceberg.snapshot-retention",
        description="how long a published Iceberg snapshot stays readable after a newer one "
        "(the current one always does); Firn keeps the files it shows as long",
    )

    @field_validator("*")
    @classmethod
    def _in_range(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:  # a size left unset: derived from another property
            return value
        name = cls.model_fields[info.field_name or ""].alias or ""
        if name == "compaction.major-window":
            try:
                return str(Window.parse(value))  # in a normal form
            except ConfigError as exc:
                raise ValueError(str(exc)) from exc
        if name not in RANGES and isinstance(value, bool | str):
            return value  # a switch or a choice: its type holds it
        bounds = RANGES[name]
        if not bounds.contains(value):
            raise ValueError(f"must be {bounds.describe()}, got {bounds.text(value)}")
        if name.endswith(".buckets") and value & (value - 1):
            raise ValueError(f"must be a power of two, got {value}")
        return value

    @model_validator(mode="after")
    def _pairs(self) -> TableProperties:
        problems = []
        deeper, shallower = sorted((self.change_buckets, self.base_buckets))
        if shallower > deeper * MAX_BUCKET_RATIO:
            problems.append(
                f"base.buckets ({self.base_buckets}) and change.buckets "
                f"({self.change_buckets}) must be within a factor of {MAX_BUCKET_RATIO} "
                "of each other (change both in one call to move further)"
            )
        if self.small_file_bytes is not None and self.small_file_bytes > self.target_file_size // 2:
            problems.append(
                f"small-file-bytes ({format_size(self.small_file_bytes)}) must be at most "
                f"half of target-file-size ({format_size(self.target_file_size)}), so the "
                "files compaction writes do not count as small themselves"
            )
        if self.major_delete_bytes_lowest > self.major_delete_bytes:
            problems.append(
                f"major.delete-bytes-lowest ({format_size(self.major_delete_bytes_lowest)}) "
                f"must be at most major.delete-bytes ({format_size(self.major_delete_bytes)})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def window(self) -> Window | None:
        """The off-peak window for folds, if the table has one."""
        return None if self.major_window is None else Window.parse(self.major_window)

    @property
    def small_file_threshold(self) -> int:
        return self.small_file_bytes or self.target_file_size // 8

    @property
    def vector_min_file_bytes(self) -> int:
        """The smallest base file a fold may keep with a deletion vector. Below
        ``small-file-bytes`` too by default: an event log's base stays small for a
        while (a node's whole base is one file under the limit), and rewriting it at
        every fold for a few late updates wrote each row three times (bench/README,
        2026-11-26). A hundred-and-twenty-eighth of it: an event log that folds at every
        cycle appends a file of one fold's new keys each time (about 10 KB at the demo's
        sizes), and late updates touch those too; rewriting each one a late key falls in
        made folds look too dear to run at an eighth (1.55x rewritten per byte committed
        against 1.02x), and at a sixty-fourth (16 KiB) each such file was still rewritten
        once into the next fold's output (five minutes: 1.31x against 1.29x). Far below
        it a vector is not worth its own file, and coalescing merges such files anyway."""
        return self.deletion_vector_min_bytes or max(1, self.small_file_threshold // 128)

    def vertical_group(self, table: TableSchema) -> int:
        """Value columns per group of ``table``'s major merges; 0: row by row."""
        values = len(table.schema) - len(table.primary_key)
        wide = self.vertical_min_columns and values >= self.vertical_min_columns
        return self.vertical_group_columns if table.keyed and wide else 0

    @classmethod
    def parse(cls, values: dict[str, Any] | None) -> TableProperties:
        """Validate user-given properties; ``ConfigError`` names every bad one."""
        if values is not None and not isinstance(values, dict):
            raise ConfigError(f"properties must be a dict, got {type(values).__name__}")
        try:
            return cls.model_validate(values or {})
        except ValidationError as exc:
            raise ConfigError(f"bad table properties: {_problems(exc)}") from exc

    @classmethod
    def from_catalog(cls, values: dict[str, Any], table: str) -> TableProperties:
        """Stored properties; a value outside a range added since the table was made
        is read as the nearest allowed one, with a warning, not refused."""
        try:
            return cls.parse(values)
        except ConfigError as exc:
            fixed = _nearest_allowed(values)
            log.warning("table %s: stored properties read as %s: %s", table, fixed, exc)
            return cls.parse(fixed)

    def merged(self, updates: dict[str, Any]) -> TableProperties:
        """These properties with ``updates`` (dotted names) applied and re-validated."""
        if not isinstance(updates, dict):
            raise ConfigError(f"updates must be a dict, got {type(updates).__name__}")
        return self.parse({**self.as_dict(), **updates})

    def as_dict(self) -> dict[str, Any]:
        """The dotted-name form, as stored in the catalog."""
        return self.model_dump(by_alias=True, exclude_none=True)


def _problems(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def _nearest_allowed(values: dict[str, Any]) -> dict[str, Any]:
    """Stored (already numeric) values moved into their ranges and pair rules."""
    fixed = {
        k: type(v)(RANGES[k].clamp(v)) if k in RANGES and isinstance(v, int | float) else v
        for k, v in values.items()
    }
    change = fixed.get("change.buckets", 4)
    base = fixed.get("base.buckets", 4)
    fixed["base.buckets"] = min(max(base, change // MAX_BUCKET_RATIO), change * MAX_BUCKET_RATIO)
    target = fixed.get("target-file-size", 128 * MiB)
    if "small-file-bytes" in fixed:
        fixed["small-file-bytes"] = min(fixed["small-file-bytes"], target // 2)
    if "major.delete-bytes-lowest" in fixed:
        lowest = fixed["major.delete-bytes-lowest"]
        fixed["major.delete-bytes-lowest"] = min(lowest, fixed.get("major.delete-bytes", 64 * MiB))
    return fixed
