-- Schema evolution (firn.model.evolution): a table's schema changes in versions.
-- catalog_table keeps the current one (schema_ipc, primary_key, schema_id); every
-- version, the first included, is a row here with the snapshot it began at, so a
-- read at an older snapshot sees that snapshot's schema. A schema change is one
-- transaction: the new row, the table row, and a snapshot of kind 'schema' (which
-- adds and removes no file).
CREATE TABLE table_schema (
    table_id        bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    schema_id       integer NOT NULL CHECK (schema_id >= 0),
    schema_ipc      bytea NOT NULL,      -- the Arrow schema: field ids, docs, defaults
    primary_key     text[] NOT NULL,     -- renames change the names, never the columns
    snapshot_id     bigint NOT NULL,     -- the snapshot it began at (0: as created)
    changes         jsonb NOT NULL DEFAULT '[]',  -- what the change did, in words
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, schema_id)
);
-- Every table made before this migration has one version, the schema it was made with.
INSERT INTO table_schema (table_id, schema_id, schema_ipc, primary_key, snapshot_id, created_at)
    SELECT table_id, 0, schema_ipc, primary_key, 0, created_at FROM catalog_table;

ALTER TABLE catalog_table
    ADD COLUMN schema_id integer NOT NULL DEFAULT 0,
    -- The greatest field id ever given: a new column never reuses a dropped one's.
    ADD COLUMN last_column_id integer NOT NULL DEFAULT 0;

-- The version each data file was written under: a read matches its columns to the
-- read's version by field id (firn.model.projection).
ALTER TABLE data_file ADD COLUMN schema_id integer NOT NULL DEFAULT 0;

ALTER TABLE snapshot DROP CONSTRAINT snapshot_kind_check;
ALTER TABLE snapshot ADD CONSTRAINT snapshot_kind_check
    CHECK (kind IN ('commit', 'compaction', 'load', 'schema'));
