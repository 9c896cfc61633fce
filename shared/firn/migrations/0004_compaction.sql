-- Compaction plans and tasks (design §5, 7, 9). A plan is one partition's compaction;
-- its tasks are the independent pieces an executor runs. States are written as
-- compare-and-set on the old state, and every change is recorded in
-- state_transition, so redelivered or stale events can neither move a task twice
-- nor lose the history of why it moved.

CREATE TABLE compaction_plan (
    plan_id          bigserial PRIMARY KEY,
    table_id         bigint NOT NULL,
    partition_key    text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('major', 'minor', 'full', 'bin-pack')),
    state            text NOT NULL,
    from_merged_seq  bigint NOT NULL,   -- max_merged_seq the plan started from
    to_seq           bigint NOT NULL,   -- S: the greatest change seq the plan folds in
    planned_snapshot bigint NOT NULL,   -- the snapshot the planner read
    committed_snapshot bigint,
    reason           jsonb NOT NULL DEFAULT '{}',
    score            double precision NOT NULL DEFAULT 0,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (table_id, partition_key) REFERENCES catalog_partition ON DELETE CASCADE
);
-- At most one open plan per partition: the planner replaces, never adds.
CREATE UNIQUE INDEX compaction_plan_open ON compaction_plan (table_id, partition_key)
    WHERE state IN ('Planned', 'Executing', 'Committing');
CREATE INDEX compaction_plan_by_table ON compaction_plan (table_id, partition_key, plan_id);

CREATE TABLE compaction_task (
    task_id          bigserial PRIMARY KEY,
    plan_id          bigint NOT NULL REFERENCES compaction_plan ON DELETE CASCADE,
    ordinal          integer NOT NULL,  -- position in the plan
    state            text NOT NULL,
    attempt          integer NOT NULL DEFAULT 0,  -- raised by every claim
    spec             jsonb NOT NULL,    -- what to run: inputs, node, key range, S, ...
    input_bytes      bigint NOT NULL,
    lease_owner      text,
    lease_expires    timestamptz,
    outputs          jsonb,             -- the files of the Prepared attempt
    error            text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (plan_id, ordinal)
);
CREATE INDEX compaction_task_by_state ON compaction_task (state, lease_expires);

CREATE TABLE state_transition (
    transition_id    bigserial PRIMARY KEY,
    machine          text NOT NULL CHECK (machine IN ('task', 'plan')),
    entity_id        bigint NOT NULL,   -- task_id or plan_id
    from_state       text NOT NULL,
    to_state         text NOT NULL,
    attempt          integer NOT NULL DEFAULT 0,
    reason           text NOT NULL DEFAULT '',
    at               timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX state_transition_by_entity ON state_transition (machine, entity_id, transition_id);

-- Files written but never (or no longer) referenced by the catalog: outputs of failed
-- or replaced attempts. Deleted from storage after orphan.retention.
CREATE TABLE orphan_file (
    table_id         bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    path             text NOT NULL,
    reason           text NOT NULL,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    deleted_at       timestamptz,
    PRIMARY KEY (table_id, path)
);

-- When each partition was last compacted, for major.interval-max.
ALTER TABLE catalog_partition ADD COLUMN last_major_at timestamptz;
