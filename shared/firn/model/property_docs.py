"""What each table property does, for the property reference
(``docs/reference/properties.md``, written by ``docs/generate.py``): its default as
users write it and, after the range it is held to, why it is there. Kept beside
``RANGES`` so that a new property fails a unit test until it is documented here, and
a changed range until its text says so (``tests/unit/test_property_bounds.py``)."""

from __future__ import annotations

from firn.model.properties import TableProperties

PROPERTY_DOCS: dict[str, tuple[str, str]] = {
    "change.buckets": (
        "4",
        "a power of two, 1 to 1024",
    ),
    "change.split-rows": (
        "1000",
        (
            "0 to 100000 rows: a commit's rows in one partition fewer than this are "
            "written as one file per operation at the partition's root node instead of "
            "one per change node: a small file's fixed costs (its footer, its catalog "
            "row, an open for every reader) are most of what a few rows cost. On a fleet "
            "of 300 tables under 200-row commits, 1000 nearly doubled the commits a "
            "second the stack took (`bench/fleet.py`); a commit of thousands of rows a "
            "partition is split as before. Every split of the partition and "
            "every compaction task of it reads such a file and keeps its own node's rows,"
            " so reads and compaction stay parallel once the partition has base files (a "
            "partition holding only root files is still one split); 0: always split by "
            "`change.buckets`"
        ),
    ),
    "base.buckets": (
        "4",
        (
            "a power of two, 1 to 1024, and within a factor of 16 of `change.buckets` "
            "either way (a change file at a shallow node is read by every base node under"
            " it: `change.buckets` 1 with `base.buckets` 65536 would plan 65,536 tasks "
            "for a one-row commit); change both in one call to move further"
        ),
    ),
    "base.split-bytes": (
        "1MiB",
        (
            "0B to 1TiB: a partition whose base and unmerged changes hold fewer bytes "
            "than this keeps its base at the root node, as if `base.buckets` were 1: one "
            "base file, and one compaction task that reads each of its changes once (at "
            "`base.buckets` 4 a small partition's fold was four tasks, each reading every"
            " root change file to keep a quarter of its rows, with four tasks' catalog "
            "rows and events). The fold that takes the partition past it writes at "
            "`base.buckets`, and the partition stays there; 0: always at `base.buckets`"
        ),
    ),
    "target-file-size": (
        "128MiB",
        "1KiB to 16GiB",
    ),
    "file.compression": (
        "lz4",
        (
            "`lz4`, `zstd` or `snappy`: the Parquet codec (LZ4_RAW, ZSTD, SNAPPY) of the "
            "base files loads and compactions write, of minor compactions' runs and of "
            "change files (a zstd table's change files of less than 1 MiB are snappy: "
            "zstd's setup per column is most of a small file's write). "
            "LZ4 decodes about twice as fast as the other two and encodes faster, for "
            "files about a third larger than zstd's (as large as snappy's): Firn's base "
            "files are read far more often than written. Every engine that reads "
            "Parquet 2.9 or later reads LZ4_RAW (Spark 3.4+, DuckDB, Trino, pyarrow); "
            "`zstd` suits storage billed by the byte. Files keep the codec they were "
            "written with; a change applies to the files written after it"
        ),
    ),
    "small-file-bytes": (
        "`target-file-size` / 8",
        (
            "1B to 8GiB, and at most half of `target-file-size` (so the files compaction "
            "writes do not count as small)"
        ),
    ),
    "major.file-count": (
        "12",
        "1 to 10000",
    ),
    "major.delete-ratio": (
        "0.1",
        "above 0 to 100",
    ),
    "major.delete-bytes-lowest": (
        "1MiB",
        "1B to 1TiB, and at most `major.delete-bytes`",
    ),
    "major.delete-bytes": (
        "64MiB",
        "1B to 1TiB",
    ),
    "major.change-ratio": (
        "0.3",
        "above 0 to 1000",
    ),
    "major.change-bytes-lowest": (
        "64KiB",
        (
            "0B to 1TiB: unmerged bytes per base node below which the change-ratio rule, "
            "and the first fold of a partition never folded, wait until a change node "
            "holds `minor.file-count` sorted runs. A small table's partition otherwise "
            "folds after every commit or two (its base is as small as a commit), which is"
            " most of a fleet's compaction work for reads that merge a few small runs "
            "anyway; Paimon's universal compaction waits for its sorted-run trigger the "
            "same way. A partition folded before still folds within `major.interval-max`"
            " of its last fold, one never folded within `major.interval-max` of its "
            "oldest unmerged commit. 0 (the default before 2026-12-05): fold as soon as "
            "the ratio says, for a small table whose published Iceberg view must follow "
            "each commit"
        ),
    ),
    "major.interval-max": (
        "1h",
        "1s to 365d",
    ),
    "minor.file-count": (
        "10",
        (
            "1 to 10000 (sorted runs of a node that start a merge of its newest runs; "
            "under `major.change-bytes-lowest`, the runs a small partition collects "
            "before it folds. 5 before 2026-12-05: a read of a small partition opens "
            "half as many change files a node, for twice as many folds)"
        ),
    ),
    "minor.size-ratio": (
        "0.01",
        (
            "0 to 100 (an older run joins a merge while it is at most 1 + this times the "
            "runs merged so far: Paimon's `compaction.size-ratio`, 1 %)"
        ),
    ),
    "compaction.major-window": (
        "none",
        (
            "a daily window `HH:MM-HH:MM` (UTC unless a zone follows: `01:00-05:00 "
            "Europe/Paris`; may run past midnight) outside which the services fold no "
            "unit, except one at `write.stall-runs`; merges of runs and manual "
            "compactions run any time"
        ),
    ),
    "compaction.quota": (
        "0.5",
        (
            "above 0 to 10000 (executor slots the table's tasks may keep busy on average "
            "over the last 5 minutes; past it, other tables' waiting tasks are claimed "
            "first, after Amoro's quota per table; with nobody else waiting it still gets"
            " every free slot)"
        ),
    ),
    "compaction.gather-partitions": (
        "8",
        (
            "1 to 1000 (partitions one plan request of the services plans at once: its "
            "own and, up to this many in all, the table's other due partitions, most in "
            "need first, for a table of at most 64 partitions; their plans run together "
            "and commit in one transaction and one snapshot, so a fleet of small tables "
            "pays a plan's fixed costs once a table rather than once a partition. 1: each "
            "request plans only its own partition)"
        ),
    ),
    "compaction.vertical.min-columns": (
        "32",
        (
            "0 to 100000 (a major merge of a table with at least this many value columns "
            "runs [column group by column group](../guide/how-it-works.md#wide-tables): "
            "its keys first, then `compaction.vertical.group-columns` value columns at a "
            "time, so a task's memory stays near its keys plus one group however wide its"
            " rows; below it, row by row; 0: always row by row)"
        ),
    ),
    "compaction.vertical.group-columns": (
        "8",
        (
            "1 to 100000 (value columns a vertical merge reads, orders and writes at a "
            "time: fewer hold less memory, more open each input fewer times)"
        ),
    ),
    "write.stall-runs": (
        "20",
        (
            "0 to 10000 (a commit that leaves a change node with this many sorted runs "
            "reports a stall: back-pressure; 0 never does)"
        ),
    ),
    "deletion-vectors.max-ratio": (
        "0.3",
        (
            "0 to 1 (a fold keeps a base file its changes touch, hiding the replaced rows"
            " with a [deletion vector](../guide/how-it-works.md#deletion-vectors), while "
            "the vector hides less than this share of the file's rows and the file is at "
            "least `deletion-vectors.min-file-bytes`; past it the file is rewritten, "
            "after Iceberg's delete-ratio threshold 0.3; 0 rewrites every touched file)"
        ),
    ),
    "deletion-vectors.min-file-bytes": (
        "`small-file-bytes` / 128",
        (
            "1B to 8GiB (the smallest base file a fold keeps with a deletion vector; a "
            "smaller touched file is rewritten)"
        ),
    ),
    "schema.rewrite-ratio": (
        "1",
        (
            "0 to 100 (bytes of base files written under an older [schema "
            "version](../guide/tables.md#schema-evolution) that a partition's major plans"
            " rewrite into the current version, per byte its compaction wrote for its "
            "changes since the version began: old files are rewritten at most at this "
            "multiple of the partition's normal compaction rate; 0: only when a fold "
            "touches them)"
        ),
    ),
    "schema.ignore-dropped-columns": (
        "false",
        (
            "`true` or `false` (a commit that still sends a column the table dropped: "
            "ignored instead of refused)"
        ),
    ),
    "task.max-bytes": (
        "512MiB",
        "1KiB to 1TiB",
    ),
    "task.max-attempts": (
        "5",
        "1 to 100",
    ),
    "task.lease": (
        "60s",
        "3s to 1d (the heartbeat renews it every third)",
    ),
    "snapshot.retention": (
        "12h",
        "0s to 36500d (now minus the retention must be a Postgres timestamp)",
    ),
    "orphan.retention": (
        "2d",
        "0s to 36500d",
    ),
    "iceberg.publish": (
        "true",
        (
            "`true` or `false` (publish the table as an [Apache Iceberg "
            "table](../guide/other-engines.md) of the same name)"
        ),
    ),
    "iceberg.snapshot-retention": (
        "1h",
        (
            "0s to 36500d (how long a published Iceberg snapshot stays readable once a "
            "newer one exists; the current one always does, and Firn keeps the files it "
            "shows as long)"
        ),
    ),
}
"""Property name -> (default, what it allows and does), in the reference's order."""


def property_names() -> list[str]:
    """Every property a table takes, by its dotted name."""
    return [f.alias for f in TableProperties.model_fields.values() if f.alias]


def reference_page() -> str:
    """The property reference page, in Markdown."""
    lines = [
        "# Table properties",
        "",
        "<!-- Generated by docs/generate.py from",
        "shared/firn/model/property_docs.py and RANGES; do not edit by hand. -->",
        "",
        "Properties are set at `create_table(..., properties=...)`, with",
        "`Table.set_properties` or `firn table create --property NAME=VALUE`. Sizes take a",
        "number of bytes or a `B`/`KiB`/`MiB`/`GiB`/`TiB` suffix, durations a number of",
        "seconds or an `s`/`min`/`h`/`d` suffix. Every property has a range in which it",
        "works end to end, checked by `create_table`, `set_properties` and",
        "`firn table create` alike; a table created before a range existed may hold a",
        "value outside it: it is read as the nearest allowed value, with a warning, until",
        "a new one is stored. Numbers must be finite and not booleans. The setting",
        "`FIRN_TABLE_DEFAULTS` (a JSON object of properties) gives every table created",
        "through it those properties where its own say nothing.",
        "",
        "| property | default | allowed |",
        "| --- | --- | --- |",
    ]
    lines += [
        f"| `{name}` | {default} | {allowed} |"
        for name, (default, allowed) in PROPERTY_DOCS.items()
    ]
    return "\n".join(lines) + "\n"
