-- A task's partition on its own row. A task reads and writes one partition (its
-- spec's partition_key), but the readers of that partition took it from the plan
-- row, which names one partition per plan. Table plans (docs/proposals/table-plans.md)
-- let a plan cover several partitions of a table, so those readers move to the task
-- row first. Filled from the plan row: today the two always agree.
ALTER TABLE compaction_task ADD COLUMN partition_key text;
UPDATE compaction_task t SET partition_key = p.partition_key
    FROM compaction_plan p WHERE p.plan_id = t.plan_id;
ALTER TABLE compaction_task ALTER COLUMN partition_key SET NOT NULL;
