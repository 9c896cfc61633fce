-- The keyed-table catalog (design §2, 3). One row per table, partition, snapshot and
-- data file. Files are never updated except to record the snapshot that removed them;
-- a reader pinned at snapshot S sees the files with added <= S < removed.

CREATE TABLE catalog_table (
    table_id        bigserial PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    schema_ipc      bytea NOT NULL,           -- the Arrow schema, IPC-serialised
    primary_key     text[] NOT NULL,
    partition_by    text[] NOT NULL,
    properties      jsonb NOT NULL,
    last_seq        bigint NOT NULL DEFAULT 0,  -- greatest allocated change seq
    last_snapshot   bigint NOT NULL DEFAULT 0,  -- greatest allocated snapshot id
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE catalog_partition (
    table_id        bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    partition_key   text NOT NULL,             -- Hive-style path, '' when unpartitioned
    partition_values jsonb NOT NULL,
    max_merged_seq  bigint NOT NULL DEFAULT 0,
    max_seq         bigint NOT NULL DEFAULT 0, -- greatest change seq committed here
    PRIMARY KEY (table_id, partition_key)
);

-- max_merged_seq as of each snapshot that changed it, so a pinned reader sees the
-- value of its snapshot.
CREATE TABLE partition_merge_history (
    table_id        bigint NOT NULL,
    partition_key   text NOT NULL,
    snapshot_id     bigint NOT NULL,
    max_merged_seq  bigint NOT NULL,
    PRIMARY KEY (table_id, partition_key, snapshot_id),
    FOREIGN KEY (table_id, partition_key) REFERENCES catalog_partition ON DELETE CASCADE
);

CREATE TABLE snapshot (
    table_id        bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    snapshot_id     bigint NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('commit', 'compaction')),
    seq             bigint,                    -- the change seq, for kind = 'commit'
    created_at      timestamptz NOT NULL DEFAULT now(),
    summary         jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (table_id, snapshot_id)
);

CREATE TABLE data_file (
    file_id          bigserial PRIMARY KEY,
    table_id         bigint NOT NULL,
    partition_key    text NOT NULL,
    store            text NOT NULL CHECK (store IN ('change', 'base')),
    file_type        char(1) NOT NULL CHECK (file_type IN ('I', 'D', 'B')),
    node_m           integer NOT NULL CHECK (node_m > 0 AND (node_m & (node_m - 1)) = 0),
    node_i           integer NOT NULL CHECK (node_i >= 0 AND node_i < node_m),
    seq              bigint NOT NULL,
    path             text NOT NULL UNIQUE,
    size_bytes       bigint NOT NULL,
    record_count     bigint NOT NULL,
    min_key          jsonb,
    max_key          jsonb,
    added_snapshot   bigint NOT NULL,
    removed_snapshot bigint,
    FOREIGN KEY (table_id, partition_key) REFERENCES catalog_partition ON DELETE CASCADE,
    CHECK ((store = 'base') = (file_type = 'B'))
);

-- What the planner and metrics ask: the live files of a partition by store and seq.
CREATE INDEX data_file_live ON data_file (table_id, partition_key, store, seq)
    WHERE removed_snapshot IS NULL;
-- What a pinned reader and retention ask: files by the snapshots that added/removed them.
CREATE INDEX data_file_added ON data_file (table_id, added_snapshot);
CREATE INDEX data_file_removed ON data_file (table_id, removed_snapshot)
    WHERE removed_snapshot IS NOT NULL;
