-- firn_busiest_runs, the look back-pressure takes when a commit registers (migration
-- 0021), in PL/pgSQL instead of SQL: a SQL function that cannot be inlined is planned
-- again at every call, and planning its query took about 1.4 ms of the catalog's CPU a
-- commit under a fleet's load (bench/fleet.py --statements: as much as registering
-- the commit itself). A PL/pgSQL function keeps its plan for the session. The same
-- query, the same answer; the grants stay with the function.
CREATE OR REPLACE FUNCTION firn_busiest_runs(p_table bigint, p_partitions text[]) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH counted AS (
            SELECT f.partition_key, f.node_m, f.node_i, count(DISTINCT f.seq) AS n
            FROM data_file f JOIN catalog_partition p USING (table_id, partition_key)
            WHERE f.table_id = p_table AND f.partition_key = ANY(p_partitions)
              AND f.store = 'change' AND f.removed_snapshot IS NULL
              AND f.seq > p.max_merged_seq
            GROUP BY f.partition_key, f.node_m, f.node_i
        ), totals AS (
            SELECT c.partition_key, c.node_m, c.node_i, sum(a.n) AS runs FROM counted c
            JOIN counted a ON a.partition_key = c.partition_key
                AND a.node_m <= c.node_m AND c.node_i % a.node_m = a.node_i
            GROUP BY c.partition_key, c.node_m, c.node_i
        )
        SELECT coalesce(jsonb_object_agg(partition_key, jsonb_build_array(node_m, node_i, runs)),
                        '{}'::jsonb)
        FROM (SELECT DISTINCT ON (partition_key) partition_key, node_m, node_i, runs
              FROM totals ORDER BY partition_key, runs DESC, node_m, node_i) busiest
    );
END
$$;
