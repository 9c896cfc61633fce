"""The options of ``df.write.format("firn")`` and ``df.writeStream.format("firn")``,
checked once on the driver before any task runs.

- ``path`` (``.save(name)``): the table's name;
- ``op``: ``upsert`` or ``delete``, every row's operation when there is no ``_op``
  column (default ``upsert``);
- ``order_by``: a column (not a table column) that orders the rows of one key;
- ``partitionOverwriteMode``, with ``mode("overwrite")``: ``static`` (default)
  replaces the whole table, ``dynamic`` only the partitions the DataFrame holds
  (Spark's own names for the two);
- ``stream_id``: a streaming query's stable id (default: its ``checkpointLocation``);
- ``database_url``, ``database_schema``, ``warehouse``, ``kafka_bootstrap``,
  ``topic_prefix``: catalog settings; unset ones come from ``FIRN_`` variables where
  the driver runs.

Spark passes options case-insensitively, so they are looked up that way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from firn.errors import ConfigError
from firn.model.changes import DELETE, UPSERT

SETTINGS = ("database_url", "database_schema", "warehouse", "kafka_bootstrap", "topic_prefix")
"""Options that become catalog settings (``FirnSettings`` fields)."""
OPS = {"upsert": UPSERT, "delete": DELETE}


@dataclass(frozen=True)
class WriteOptions:
    """What a write asked for, validated."""

    table: str
    op: str | None = None
    """``U`` or ``D`` for every row, or None when the DataFrame has an ``_op`` column."""
    order_by: str | None = None
    dynamic_overwrite: bool = False
    stream_id: str | None = None
    merge_schema: bool = False
    """``mergeSchema``: columns the table has never had are added to its schema first."""
    settings: dict[str, str] = field(default_factory=dict)


def write_options(options: Mapping[str, str], *, stream: bool = False) -> WriteOptions:
    """Parse and check the options of one write (``ConfigError`` naming the bad one)."""
    lowered = {k.lower(): v for k, v in options.items()}
    table = lowered.get("path") or lowered.get("table")
    if not table:
        raise ConfigError('name the table: df.write.format("firn").save("table_name")')
    op = lowered.get("op")
    if op is not None and op.lower() not in OPS:
        raise ConfigError(f"option op must be 'upsert' or 'delete', got {op!r}")
    mode = lowered.get("partitionoverwritemode", "static").lower()
    if mode not in ("static", "dynamic"):
        raise ConfigError(f"partitionOverwriteMode must be 'static' or 'dynamic', got {mode!r}")
    stream_id = lowered.get("stream_id") or lowered.get("checkpointlocation")
    if stream and not stream_id:
        raise ConfigError(
            "a streaming write to Firn needs a stable id to commit each micro-batch once: "
            'set option("checkpointLocation", ...) or option("stream_id", ...)'
        )
    merge = lowered.get("mergeschema", "false").lower()
    if merge not in ("true", "false"):
        raise ConfigError(f"option mergeSchema must be 'true' or 'false', got {merge!r}")
    return WriteOptions(
        table=table,
        merge_schema=merge == "true",
        op=None if op is None else OPS[op.lower()],
        order_by=lowered.get("order_by"),
        dynamic_overwrite=mode == "dynamic",
        stream_id=stream_id,
        settings={k: lowered[k] for k in SETTINGS if lowered.get(k)},
    )
