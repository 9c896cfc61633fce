-- The catalog rows that change at every commit and every task move (issue 37): a
-- partition's max_seq and change stamp, a table's last seq and snapshot, a task's
-- state, a plan's state. Each update leaves a dead row version behind, and under a
-- fleet's load Postgres's default autovacuum (a table is vacuumed once a fifth of it
-- is dead) let the dispatchers' queue query wade through ten index entries for each
-- live Pending task (10 ms at every wake-up, on 3,000 plans). Vacuum these tables once
-- a hundredth of them is dead, and leave room in their pages so that an update that
-- touches no indexed column stays on its page (a HOT update: no new index entries).
ALTER TABLE compaction_task SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 200,
    autovacuum_analyze_scale_factor = 0.02, fillfactor = 80
);
ALTER TABLE compaction_plan SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 200,
    autovacuum_analyze_scale_factor = 0.02, fillfactor = 80
);
ALTER TABLE catalog_partition SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 200,
    autovacuum_analyze_scale_factor = 0.02, fillfactor = 70
);
ALTER TABLE catalog_table SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 100,
    fillfactor = 70
);
