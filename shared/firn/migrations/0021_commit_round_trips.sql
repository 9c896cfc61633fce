-- A producer commit in two catalog round trips instead of six (issue 37). A small
-- commit used to ask for the table's schema version, stage its paths, BEGIN,
-- register, COMMIT, then look at its partitions' runs per node (back-pressure): on a
-- fleet's loaded cores every round trip waits for a core, and the six were most of a
-- commit's latency. Now staging answers the schema version, and registering (one
-- statement, its own transaction on an autocommit connection) answers the runs.

-- Stage a commit's paths (as firn_stage_paths) and return the table's current schema
-- version, which the commit was checked against: a commit that finds it changed
-- unstages its paths and checks the change set again.
CREATE FUNCTION firn_stage_commit(p_table bigint, p_paths text[], p_reason text)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    v_schema integer;
BEGIN
    SELECT t.schema_id INTO v_schema FROM catalog_table t WHERE t.table_id = p_table;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FN404',
            MESSAGE = format('table %s no longer exists', p_table);
    END IF;
    PERFORM firn_stage_paths(p_table, p_paths, p_reason, false);
    RETURN v_schema;
END
$$;

-- Per partition asked for, its change node with the most sorted runs (unmerged change
-- seqs, its own and its ancestors') as [node_m, node_i, runs], the smallest node on a
-- tie: firn.catalog.metrics.busiest_nodes, in SQL. Partitions without unmerged
-- changes are left out.
CREATE FUNCTION firn_busiest_runs(p_table bigint, p_partitions text[]) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH counted AS (
        SELECT f.partition_key, f.node_m, f.node_i, count(DISTINCT f.seq) AS n
        FROM data_file f JOIN catalog_partition p USING (table_id, partition_key)
        WHERE f.table_id = p_table AND f.partition_key = ANY(p_partitions)
          AND f.store = 'change' AND f.removed_snapshot IS NULL AND f.seq > p.max_merged_seq
        GROUP BY f.partition_key, f.node_m, f.node_i
    ), totals AS (
        SELECT c.partition_key, c.node_m, c.node_i, sum(a.n) AS runs FROM counted c
        JOIN counted a ON a.partition_key = c.partition_key
            AND a.node_m <= c.node_m AND c.node_i % a.node_m = a.node_i
        GROUP BY c.partition_key, c.node_m, c.node_i
    )
    SELECT coalesce(jsonb_object_agg(partition_key, jsonb_build_array(node_m, node_i, runs)),
                    '{}'::jsonb)
    FROM (SELECT DISTINCT ON (partition_key) partition_key, node_m, node_i, runs FROM totals
          ORDER BY partition_key, runs DESC, node_m, node_i) busiest
$$;

-- firn_register_commit, and with p_runs the runs of the busiest node of each partition
-- the commit wrote (firn_busiest_runs, after the commit's own files): the look
-- back-pressure takes, without a round trip of its own.
CREATE FUNCTION firn_register_commit(p_table bigint, p_files jsonb, p_staged_dir text,
                                     p_query_id text, p_batch_id bigint, p_runs boolean)
RETURNS TABLE (seq bigint, snapshot_id bigint, committed_at timestamptz, runs jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    v record;
BEGIN
    SELECT * INTO v FROM firn_register_commit(p_table, p_files, p_staged_dir, p_query_id,
                                              p_batch_id) r;
    RETURN QUERY SELECT v.seq, v.snapshot_id, v.committed_at,
        CASE WHEN p_runs THEN firn_busiest_runs(p_table, ARRAY(
            SELECT DISTINCT f->>'partition_key' FROM jsonb_array_elements(p_files) f)) END;
END
$$;

REVOKE ALL ON FUNCTION firn_stage_commit(bigint, text[], text),
    firn_busiest_runs(bigint, text[]),
    firn_register_commit(bigint, jsonb, text, text, bigint, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION firn_stage_commit(bigint, text[], text),
    firn_register_commit(bigint, jsonb, text, text, bigint, boolean) TO firn_producer;
