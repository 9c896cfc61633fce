-- When each task's latest attempt started and ended (issue 15: per-table quotas).
-- A dispatcher weighs each table's executor seconds over a recent window against the
-- table's compaction.quota; these two columns are what it sums.
ALTER TABLE compaction_task ADD COLUMN started_at timestamptz;
ALTER TABLE compaction_task ADD COLUMN finished_at timestamptz;
CREATE INDEX compaction_task_finished ON compaction_task (finished_at)
    WHERE finished_at IS NOT NULL;
