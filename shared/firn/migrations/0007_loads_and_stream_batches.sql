-- Bulk loads (Table.load, Spark overwrite) create snapshots of their own kind: they
-- replace partitions with base files, so an incremental reader must not take their
-- files for change rows.
ALTER TABLE snapshot DROP CONSTRAINT snapshot_kind_check;
ALTER TABLE snapshot ADD CONSTRAINT snapshot_kind_check
    CHECK (kind IN ('commit', 'compaction', 'load'));

-- The micro-batches a streaming writer committed, so a retried batch (same query,
-- same batch id) is not committed twice. Written in the commit's own transaction.
CREATE TABLE stream_batch (
    table_id        bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    query_id        text NOT NULL,
    batch_id        bigint NOT NULL,
    seq             bigint,           -- the commit's seq; NULL for an empty batch
    snapshot_id     bigint,
    committed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, query_id, batch_id)
);
