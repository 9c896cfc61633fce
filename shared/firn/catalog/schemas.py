"""Schema versions in Postgres (``table_schema``): recording the first, committing a
change as one transaction, finding the version of a snapshot.

A change is a compare-and-set on ``catalog_table.schema_id`` under the table row's
lock, the lock producers' commits and compactions take first: it gets the next
snapshot id, so every snapshot before it reads the old schema and every one from it
the new. Two changes made from the same version: the second finds the version moved
and fails with nothing written (``CommitError``, retryable: open the table again).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from firn.errors import CommitError, ConfigError
from firn.model.schema import SchemaVersion, TableSchema
from firn.postgres.connection import Connection


def record_first_version(conn: Connection, table_id: int, definition: TableSchema) -> None:
    """The version a table is created with (inside the creating transaction)."""
    conn.execute(
        "INSERT INTO table_schema (table_id, schema_id, schema_ipc, primary_key, snapshot_id) "
        "VALUES (%s, %s, %s, %s, 0)",
        (table_id, definition.schema_id, definition.to_ipc(), list(definition.primary_key)),
    )
    conn.execute(
        "UPDATE catalog_table SET schema_id = %s, last_column_id = %s WHERE table_id = %s",
        (definition.schema_id, definition.last_column_id, table_id),
    )


def commit_schema(
    conn: Connection,
    table_id: int,
    expected_schema_id: int,
    definition: TableSchema,
    changes: Sequence[str],
) -> SchemaVersion:
    """Make ``definition`` (version ``expected_schema_id + 1``) the table's schema,
    with a snapshot of its own, in one transaction."""
    if definition.schema_id != expected_schema_id + 1:
        raise ConfigError(
            f"schema version {definition.schema_id} does not follow {expected_schema_id}"
        )
    with conn.transaction():
        row = conn.execute(
            "UPDATE catalog_table SET schema_id = %s, schema_ipc = %s, primary_key = %s, "
            "last_column_id = %s, last_snapshot = last_snapshot + 1 "
            "WHERE table_id = %s AND schema_id = %s RETURNING last_snapshot, now()",
            (
                definition.schema_id,
                definition.to_ipc(),
                list(definition.primary_key),
                definition.last_column_id,
                table_id,
                expected_schema_id,
            ),
        ).fetchone()
        if row is None:
            exists = conn.execute(
                "SELECT schema_id FROM catalog_table WHERE table_id = %s", (table_id,)
            ).fetchone()
            if exists is None:
                raise ConfigError(f"table {table_id} no longer exists")
            raise CommitError(
                f"the schema changed since this change was prepared (version "
                f"{expected_schema_id} is now {exists[0]}): open the table again and repeat "
                "the change",
                retryable=True,
            )
        snapshot_id, now = row
        conn.execute(
            "INSERT INTO table_schema (table_id, schema_id, schema_ipc, primary_key, "
            "snapshot_id, changes, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                table_id,
                definition.schema_id,
                definition.to_ipc(),
                list(definition.primary_key),
                snapshot_id,
                json.dumps(list(changes)),
                now,
            ),
        )
        conn.execute(
            "INSERT INTO snapshot (table_id, snapshot_id, kind, created_at, summary) "
            "VALUES (%s, %s, 'schema', %s, %s)",
            (
                table_id,
                snapshot_id,
                now,
                json.dumps({"schema_id": definition.schema_id, "changes": list(changes)}),
            ),
        )
    return SchemaVersion(definition.schema_id, int(snapshot_id), now, tuple(changes), definition)


def schema_versions(conn: Connection, table_id: int) -> list[SchemaVersion]:
    """Every version of the table, oldest first, each able to read files of all the
    others (``TableSchema.earlier``)."""
    rows = conn.execute(
        "SELECT v.schema_id, v.schema_ipc, v.primary_key, v.snapshot_id, v.created_at, "
        "v.changes, c.name, c.partition_by, c.last_column_id FROM table_schema v "
        "JOIN catalog_table c USING (table_id) WHERE v.table_id = %s ORDER BY v.schema_id",
        (table_id,),
    ).fetchall()
    schemas = {int(r[0]): TableSchema.schema_from_ipc(r[1]) for r in rows}
    out = []
    for sid, _, key, snapshot_id, created_at, changes, name, parts, last_id in rows:
        definition = TableSchema(
            name,
            schemas[sid],
            tuple(key),
            tuple(parts),
            schema_id=int(sid),
            last_column_id=int(last_id),
        ).with_earlier(schemas)
        out.append(
            SchemaVersion(int(sid), int(snapshot_id), created_at, tuple(changes), definition)
        )
    return out


def schema_id_at(conn: Connection, table_id: int, snapshot_id: int) -> int:
    """The schema version a read of ``snapshot_id`` sees."""
    row = conn.execute(
        "SELECT max(schema_id) FROM table_schema WHERE table_id = %s AND snapshot_id <= %s",
        (table_id, snapshot_id),
    ).fetchone()
    if row is None or row[0] is None:
        raise ConfigError(f"table {table_id} has no schema at snapshot {snapshot_id}")
    return int(row[0])


def rewrite_budget(
    conn: Connection, table_id: int, partition: str, schema_id: int, ratio: float
) -> int:
    """The bytes of older-version base files a major plan of ``partition`` may
    rewrite now (``schema.rewrite-ratio``, ``firn.model.tiering``): ``ratio`` times
    what the partition's compactions wrote since version ``schema_id`` began, less
    what they wrote for old files, less the old files' bytes already rewritten.
    Old files rewritten are counted by what was removed (about what was written for
    them), whether this rule or a fold chose them; a file kept with a new deletion
    vector was not."""
    if ratio <= 0:
        return 0
    row = conn.execute(
        "WITH began AS (SELECT snapshot_id FROM table_schema WHERE table_id = %(t)s "
        "AND schema_id = %(v)s) "
        # A compaction snapshot's summary is one plan's, or a list of the plans that
        # committed together (firn.catalog.compactions.plan_summaries).
        "SELECT (SELECT coalesce(sum((p.plan->>'added_bytes')::bigint), 0) FROM snapshot s "
        "CROSS JOIN LATERAL jsonb_array_elements(coalesce(s.summary->'plans', "
        "jsonb_build_array(s.summary))) AS p(plan) "
        "WHERE s.table_id = %(t)s AND s.kind = 'compaction' AND p.plan->>'partition' = %(p)s "
        "AND s.snapshot_id > (SELECT snapshot_id FROM began)), "
        "(SELECT coalesce(sum(f.size_bytes), 0) FROM data_file f WHERE f.table_id = %(t)s "
        "AND f.partition_key = %(p)s AND f.store = 'base' AND f.schema_id < %(v)s "
        "AND f.removed_snapshot > (SELECT snapshot_id FROM began) "
        # A file kept with a new deletion vector is a new row for the same path, added
        # by the snapshot that removed the old one: not rewritten.
        "AND NOT EXISTS (SELECT 1 FROM data_file g WHERE g.path = f.path "
        "AND g.added_snapshot = f.removed_snapshot))",
        {"t": table_id, "v": schema_id, "p": partition},
    ).fetchone()
    written, rewritten = (0, 0) if row is None else (int(row[0]), int(row[1]))
    return max(0, int(ratio * max(0, written - rewritten)) - rewritten)


def current_schema_id(conn: Connection, table_id: int) -> int:
    row = conn.execute(
        "SELECT schema_id FROM catalog_table WHERE table_id = %s", (table_id,)
    ).fetchone()
    if row is None:
        raise ConfigError(f"table {table_id} no longer exists")
    return int(row[0])


def definition_at(conn: Connection, table_id: int, snapshot_id: int) -> TableSchema:
    """The table's definition at ``snapshot_id``, able to read files of every version."""
    wanted = schema_id_at(conn, table_id, snapshot_id)
    for version in schema_versions(conn, table_id):
        if version.schema_id == wanted:
            return version.definition
    raise ConfigError(f"table {table_id} has no schema version {wanted}")
