"""Reading a Firn table from Spark: ``spark.read.format("firn").load(name)``.

Who runs what (PySpark's Python Data Source API, Spark 4.1+):

- ``read_schema`` (for ``DataSource.schema``), ``firn_reader`` and the reader's
  ``pushFilters`` and ``partitions`` run in a Python worker Spark starts on the
  driver's machine while it plans the query: they reach the catalog (Postgres),
  resolve the table, convert the pushed filters (``firn.spark.pushdown``) and plan
  the scan (``Table.scan(...).splits()`` or, for an incremental read,
  ``Table.changes(...).splits()``), one Spark partition per split, small ones packed
  together (``packed``);
- ``read`` runs in Spark tasks on executors: it reads its splits' files and yields
  Arrow batches. Executors never reach the catalog; a split carries all it needs,
  and reading it imports only pyarrow, numpy and Firn's executor-safe modules (the
  reader class is pickled to them, so this module imports the API only inside the
  driver-side functions).

Filters, two ways:

- ``option("filter", "region = 'eu' and id in (1, 2)")`` (Firn's string form):
  always applied and pruned with, exactly as ``Table.scan(filter=...)``;
- Spark's own filters (``.where(...)``, SQL ``WHERE``), pushed into the scan with
  ``option("pushdown", "true")`` (``firn.spark.pushdown`` says which). Not by
  default, because Spark 4.1-4.3 keeps the plan of the last pushdown on the loaded
  DataFrame (``PythonDataSourceV2.readInfo``) and reuses it for a later query on the
  same DataFrame or temporary view that has no filter Spark can push: that query
  would silently get the earlier query's rows only. With pushdown on, load the
  table again for each query (Spark's later versions keep the plan per scan).
  Without pushdown Spark applies every filter itself: the rows are right, just read
  unpruned.

A loaded DataFrame is planned once, at its first query: later queries on it read
the same snapshot (load again for newer commits).

Columns: the Python Data Source API (4.1) prunes no columns on its own: a query's
``select`` still asks the source for every column. A read names fewer columns with
``option("columns", "id,qty")`` or a schema of its own (``.schema("id long, qty
long")``); only those columns (and the key, for the merge) are read from the files.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import DataType, StructField, StructType

from firn.engine.splits import CHANGE_COLUMNS, Split, result_schema
from firn.errors import ConfigError
from firn.model.filters import Filter, conjunction
from firn.model.schema import TableSchema
from firn.spark.catalogs import table_for_read
from firn.spark.pushdown import always, exact_for_changes, push

if TYPE_CHECKING:
    from pyspark.sql import datasource as sds

    from firn.api.table import Table
    from firn.engine.table_scan import Scan

SETTINGS = ("database_url", "database_schema", "warehouse")
"""Options that become catalog settings; unset ones come from ``FIRN_`` variables
where the driver runs."""
BATCH_ROWS = 131_072
"""Rows per Arrow batch handed to Spark."""
PARTITION_ROWS = 1_000_000
"""Default of option ``partition_rows``: consecutive splits with fewer rows in their
files are read in one Spark task, up to about this many in all (a split that big is
a task of its own). Each task of a Python source costs Spark tens of milliseconds
before it reads a row; a compacted table of 1M rows in 64 splits (``base.buckets``
64) took 3.0 s to read one split a task, most of it that cost. The packing never
joins more than a million rows, so a table large enough to keep a cluster busy is
read split by split as before."""


@dataclass(frozen=True)
class ReadOptions:
    """What a read asked for, validated (``read_options``)."""

    table: str
    snapshot: int | None = None
    """The merged view at this snapshot (default: the latest when planned)."""
    start_snapshot: int | None = None
    """An incremental read: the change rows after this snapshot ..."""
    end_snapshot: int | None = None
    """... up to and including this one (default: the latest)."""
    columns: tuple[str, ...] | None = None
    filter: str | None = None
    """A filter in Firn's string form, applied (and pruned with) by the scan."""
    pushdown: bool = False
    """Take Spark's pushed filters (see the module doc for why not by default)."""
    splits: str = "all"
    """Option ``splits``: ``merging``, only the splits Spark cannot read natively
    (``firn.spark.native``, which reads the others itself); ``python``, only those
    the JVM merge reader does not take either (``firn.spark.handoff.kept``)."""
    partition_rows: int = PARTITION_ROWS
    """Option ``partition_rows``: smaller splits are read several to a Spark task."""
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return self.start_snapshot is not None

    @property
    def pinned(self) -> int | None:
        """The snapshot whose schema the read has (None: the latest's)."""
        return self.end_snapshot if self.changes else self.snapshot


def _snapshot(options: Mapping[str, str], name: str) -> int | None:
    return _integer(options, name, 0, "a snapshot id (an integer)", "a snapshot id (>= 0)")


def _integer(
    options: Mapping[str, str], name: str, least: int, not_integer: str, too_small: str
) -> int | None:
    """Option ``name`` as an integer of at least ``least`` (None: not given); the two
    texts say what it must be when it is not an integer, or is too small."""
    text = options.get(name)
    if text is None or str(text).strip() == "":
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"option {name} must be {not_integer}, got {text!r}") from None
    if value < least:
        raise ConfigError(f"option {name} must be {too_small}, got {value}")
    return value


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse and check a read's options (Spark passes them case-insensitively)."""
    lowered = {str(k).lower(): v for k, v in options.items()}
    table = lowered.get("path") or lowered.get("table")
    if not table:
        raise ConfigError('name the table: spark.read.format("firn").load("table_name")')
    snapshot = _snapshot(lowered, "snapshot")
    start = _snapshot(lowered, "start_snapshot")
    end = _snapshot(lowered, "end_snapshot")
    if snapshot is not None and (start is not None or end is not None):
        raise ConfigError(
            "option snapshot reads the merged view; start_snapshot/end_snapshot read "
            "the changes between two snapshots: give one or the other"
        )
    if end is not None and start is None:
        raise ConfigError("option end_snapshot needs start_snapshot (the changes after it)")
    pushdown = str(lowered.get("pushdown", "false")).strip().lower()
    if pushdown not in ("true", "false"):
        raise ConfigError(f"option pushdown must be true or false, got {lowered['pushdown']!r}")
    splits = str(lowered.get("splits", "all")).strip().lower()
    if splits not in ("all", "merging", "python"):
        raise ConfigError(
            f"option splits must be all, merging or python, got {lowered['splits']!r}"
        )
    merged_rest = start is not None or lowered.get("filter") or pushdown == "true"
    if splits != "all" and (snapshot is None or merged_rest):
        raise ConfigError(
            f"option splits={splits} reads the merged view at a pinned snapshot (option "
            "snapshot), with no filter or pushdown: firn.spark.read reads the other splits "
            "of that snapshot"
        )
    partition_rows = _integer(lowered, "partition_rows", 1, "a whole number", "at least 1")
    columns = None
    if lowered.get("columns"):
        columns = tuple(c.strip() for c in lowered["columns"].split(",") if c.strip())
    return ReadOptions(
        table=table,
        snapshot=snapshot,
        start_snapshot=start,
        end_snapshot=end,
        columns=columns,
        filter=lowered.get("filter") or None,
        pushdown=pushdown == "true",
        splits=splits,
        partition_rows=PARTITION_ROWS if partition_rows is None else partition_rows,
        settings={k: lowered[k] for k in SETTINGS if lowered.get(k)},
    )


# -- types -------------------------------------------------------------------------


def spark_type(column: str, t: pa.DataType) -> DataType:
    """The Spark type a Firn column is read as (unsigned integers widen; a
    timestamp with a time zone is Spark's TIMESTAMP, one without TIMESTAMP_NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_type

    widened = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}
    t = widened.get(t, t)
    if pa.types.is_date64(t):
        t = pa.date32()
    if pa.types.is_uint64(t):
        raise ConfigError(f"column {column!r} is uint64, which no Spark type holds")
    return from_arrow_type(t)


def spark_schema(schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, spark_type(f.name, f.type), f.nullable) for f in schema])


def _result_schema(definition: TableSchema, opts: ReadOptions) -> pa.Schema:
    """The Arrow schema of everything a read may return (before column choice)."""
    return result_schema(definition, definition.schema.names, changes=opts.changes)


# -- the driver's side -------------------------------------------------------------


def _chosen(definition: TableSchema, opts: ReadOptions) -> pa.Schema:
    full = _result_schema(definition, opts)
    if opts.columns is None:
        return full
    unknown = [c for c in opts.columns if c not in full.names]
    if unknown:
        raise ConfigError(
            f"option columns names unknown columns {unknown}; the read has {full.names}"
        )
    return pa.schema([full.field(c) for c in opts.columns])


def read_schema(options: Mapping[str, str]) -> StructType:
    """The DataFrame's schema: the table's columns (or option ``columns``), plus
    ``_op``, ``_seq``, ``_ord`` for an incremental read."""
    opts = read_options(options)
    with table_for_read(opts.settings, opts.table) as table:
        return spark_schema(_chosen(table.definition_at(opts.pinned), opts))


def firn_reader(options: Mapping[str, str], schema: StructType) -> FirnReader:
    """The reader of one query, for the columns of ``schema`` (Spark passes the
    data source's schema, or the one the user gave with ``.schema(...)``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from firn.model.filter_text import as_filter

    opts = read_options(options)
    with table_for_read(opts.settings, opts.table) as table:
        definition = table.definition_at(opts.pinned)
    available = _result_schema(definition, opts)
    for f in schema.fields:
        if f.name not in available.names:
            raise ConfigError(
                f"column {f.name!r} is not in table {opts.table!r}; it has {available.names}"
            )
        expected = spark_type(f.name, available.field(f.name).type)
        if f.dataType != expected:
            raise ConfigError(
                f"column {f.name!r} of table {opts.table!r} reads as {expected.simpleString()}, "
                f"not {f.dataType.simpleString()}"
            )
    given = as_filter(opts.filter, definition.schema) if opts.filter else None
    # Exactly the Arrow schema Spark expects of every batch (it checks).
    target = to_arrow_schema(schema, timezone="UTC")
    kind = FirnPushdownReader if opts.pushdown else FirnReader
    return kind(opts, definition, target, [] if given is None else [given])


@dataclass(frozen=True)
class SplitPartition(InputPartition):
    """One Spark partition: one or more consecutive splits of the scan (``packed``)."""

    splits: tuple[Split, ...]

    def __repr__(self) -> str:
        first = self.splits[0]
        files = sum(len(s.files) for s in self.splits)
        rows = sum(s.rows for s in self.splits)
        return (
            f"SplitPartition({first.partition!r}, {first.node}, splits={len(self.splits)}, "
            f"files={files}, rows={rows})"
        )


def packed(splits: Sequence[Split], rows: int) -> list[tuple[Split, ...]]:
    """Consecutive splits grouped as long as a group's files hold at most ``rows``
    rows; a split of more is a group of its own. Order is kept."""
    groups: list[tuple[Split, ...]] = []
    current: list[Split] = []
    held = 0
    for split in splits:
        if current and held + split.rows > rows:
            groups.append(tuple(current))
            current, held = [], 0
        current.append(split)
        held += split.rows
    if current:
        groups.append(tuple(current))
    return groups


class FirnReader(DataSourceReader):
    """Plans on the driver (``partitions``), reads on executors (``read``).
    Picklable: plain data only, no connection."""

    def __init__(
        self,
        opts: ReadOptions,
        definition: TableSchema,
        target: pa.Schema,
        filters: list[Filter],
    ) -> None:
        self.opts = opts
        self.definition = definition
        self.target = target
        self.filters = filters
        """Bound to the table's schema: option ``filter``, and the pushed filters."""

    @property
    def columns(self) -> tuple[str, ...]:
        """The table columns to read (a change split adds its change columns)."""
        names = [n for n in self.target.names if not (self.opts.changes and n in CHANGE_COLUMNS)]
        # Only change columns asked for: read the key, which every row has.
        return tuple(names) or self.definition.primary_key[:1] or self.definition.schema.names[:1]

    def plan(self, table: Table) -> Scan:
        """The planned scan of this read on ``table``."""
        filter_ = conjunction(self.filters)
        if self.opts.changes:
            assert self.opts.start_snapshot is not None
            return table.changes(
                self.opts.start_snapshot,
                self.opts.end_snapshot,
                filter=filter_,
                columns=self.columns,
            )
        return table.scan(filter=filter_, columns=self.columns, snapshot=self.opts.snapshot)

    def partitions(self) -> Sequence[InputPartition]:
        with table_for_read(self.opts.settings, self.opts.table) as table:
            splits = self.plan(table).splits()
        if self.opts.splits != "all":
            from firn.spark.handoff import kept

            schema_id = self.definition.schema_id
            splits = [s for s in splits if kept(s, schema_id, self.opts.splits)]
        return [SplitPartition(group) for group in packed(splits, self.opts.partition_rows)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitPartition):
            return  # no splits: Spark asks for its one empty partition
        for split in partition.splits:
            for rows in split.parts():
                yield from as_target(rows, self.target).to_batches(max_chunksize=BATCH_ROWS)


class FirnPushdownReader(FirnReader):
    """A reader that also takes Spark's pushed filters (``option("pushdown", "true")``)."""

    def pushFilters(self, filters: list[sds.Filter]) -> list[sds.Filter]:
        """Take what Firn answers exactly; return the rest to Spark (eagerly: a
        generator would change this reader only once Spark iterates it)."""
        if self.opts.changes:
            exact = exact_for_changes(frozenset(self.definition.primary_key))
        else:
            exact = always
        pushed, kept = push(filters, self.definition.schema, exact_for=exact)
        self.filters = [*self.filters, *pushed]
        return kept


def as_target(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """``rows`` with exactly the columns, order, types and nullability Spark expects."""
    return rows.select(target.names).cast(target)
