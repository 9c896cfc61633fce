-- Least privilege in the catalog (issue 40). The catalog's owner, the role that runs
-- these migrations, is its admin: migrations, tables, properties, schema changes and
-- bulk loads. Everyone else gets one of these group roles (they hold no login; a login
-- role is made a member of one):
--
--   firn_reader      reads every catalog row; writes nothing
--   firn_producer    reads, and commits change sets to the tables it was granted
--                    (table_grant, managed by `firn grant` / `firn revoke`), through
--                    the SECURITY DEFINER functions below and no other way
--   firn_metrics, firn_planner, firn_dispatcher, firn_committer, firn_publisher
--                    each service: reads, and writes only the rows its work changes
--   firn_operator    reads, and may ask for a compaction (the dashboard's action)
--
-- Group roles belong to the whole Postgres cluster, so every catalog on it shares
-- them; each catalog grants them only on its own schema.
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['firn_reader', 'firn_producer', 'firn_metrics',
        'firn_planner', 'firn_dispatcher', 'firn_committer', 'firn_publisher',
        'firn_operator']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', name);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- another catalog's migration created it a moment ago
            END;
        END IF;
    END LOOP;
END
$$;

-- Which roles may commit to which table. A login role is a member of the role named
-- here (or is it), so one grant can serve a team.
CREATE TABLE table_grant (
    table_id    bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    role_name   text NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, role_name)
);

-- The functions run as the catalog's owner with this schema and nothing else on
-- their search path (pg_temp last, so no one's temporary table can stand in for a
-- catalog table).
DO $$
BEGIN
    EXECUTE format('SET LOCAL search_path = %I, pg_temp', current_schema());
END
$$;

-- Whether the session's login role may commit to the table: the catalog's owner and
-- its members may commit anywhere, anyone else where a role it belongs to is granted.
CREATE FUNCTION firn_may_commit(p_table bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT pg_has_role(session_user, current_user, 'MEMBER')
        OR EXISTS (
            SELECT 1 FROM table_grant g JOIN pg_roles r ON r.rolname = g.role_name
            WHERE g.table_id = p_table AND pg_has_role(session_user, r.oid, 'MEMBER')
        )
$$;

CREATE FUNCTION firn_require_commit(p_table bigint) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT firn_may_commit(p_table) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = format('role %s may not commit to table %s', session_user,
                coalesce((SELECT name FROM catalog_table WHERE table_id = p_table),
                         p_table::text)),
            HINT = 'the catalog''s admin grants it: firn grant TABLE ROLE';
    END IF;
END
$$;

-- Record paths before a producer writes them (firn.catalog.commits.stage_paths);
-- returns how many were recorded (or, with p_refresh, made new again).
CREATE FUNCTION firn_stage_paths(p_table bigint, p_paths text[], p_reason text,
                                 p_refresh boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    staged integer;
BEGIN
    PERFORM firn_require_commit(p_table);
    IF p_refresh THEN
        INSERT INTO orphan_file (table_id, path, reason)
        SELECT p_table, unnest(p_paths), p_reason
        ON CONFLICT (table_id, path) DO UPDATE SET recorded_at = now()
        WHERE orphan_file.deleted_at IS NULL;
    ELSE
        INSERT INTO orphan_file (table_id, path, reason)
        SELECT p_table, unnest(p_paths), p_reason;
    END IF;
    GET DIAGNOSTICS staged = ROW_COUNT;
    RETURN staged;
END
$$;

-- Forget staged paths whose files a failed commit deleted.
CREATE FUNCTION firn_unstage_paths(p_table bigint, p_paths text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM firn_require_commit(p_table);
    DELETE FROM orphan_file
    WHERE table_id = p_table AND path = ANY(p_paths) AND deleted_at IS NULL;
END
$$;

-- One producer commit (firn.catalog.commits.register_commit has the why): allocate
-- seq and snapshot under the table row's lock, clear the staged records (the fence
-- against orphan cleanup), record the stream batch, the partitions, the snapshot and
-- the files. p_files: a JSON array of objects with the data_file columns a producer
-- sets. SQLSTATEs of its own: FN404 the table is gone, FN409 staged files were
-- claimed by orphan cleanup, FN410 the staged directory was.
CREATE FUNCTION firn_register_commit(p_table bigint, p_files jsonb, p_staged_dir text,
                                     p_query_id text, p_batch_id bigint)
RETURNS TABLE (seq bigint, snapshot_id bigint, committed_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    v_seq bigint;
    v_snapshot bigint;
    v_now timestamptz;
    v_files integer := jsonb_array_length(p_files);
    v_cleared integer;
BEGIN
    PERFORM firn_require_commit(p_table);
    UPDATE catalog_table t SET last_seq = t.last_seq + 1, last_snapshot = t.last_snapshot + 1
    WHERE t.table_id = p_table
    RETURNING t.last_seq, t.last_snapshot, now() INTO v_seq, v_snapshot, v_now;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FN404',
            MESSAGE = format('table %s no longer exists', p_table);
    END IF;
    IF p_staged_dir IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_files) f
                   WHERE left(f->>'path', length(p_staged_dir)) <> p_staged_dir) THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = format('files outside the staged directory %s', p_staged_dir);
        END IF;
        IF p_query_id IS NOT NULL THEN
            UPDATE orphan_file o SET recorded_at = now()
            WHERE o.table_id = p_table AND o.path = p_staged_dir AND o.deleted_at IS NULL;
        ELSE
            DELETE FROM orphan_file o
            WHERE o.table_id = p_table AND o.path = p_staged_dir AND o.deleted_at IS NULL;
        END IF;
        GET DIAGNOSTICS v_cleared = ROW_COUNT;
        IF v_cleared <> 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'FN410', MESSAGE = format(
                'the staged directory %s is no longer staged: the write took longer than '
                'orphan.retention and orphan cleanup claimed it, or it was committed already',
                p_staged_dir);
        END IF;
    ELSE
        DELETE FROM orphan_file o
        WHERE o.table_id = p_table AND o.deleted_at IS NULL
          AND o.path IN (SELECT f->>'path' FROM jsonb_array_elements(p_files) f);
        GET DIAGNOSTICS v_cleared = ROW_COUNT;
        IF v_cleared <> v_files THEN
            RAISE EXCEPTION USING ERRCODE = 'FN409', MESSAGE = format(
                '%s of %s staged files are no longer staged: the commit took longer than '
                'orphan.retention and orphan cleanup claimed them', v_files - v_cleared, v_files);
        END IF;
    END IF;
    IF p_query_id IS NOT NULL THEN
        INSERT INTO stream_batch (table_id, query_id, batch_id, seq, snapshot_id)
        VALUES (p_table, p_query_id, p_batch_id, v_seq, v_snapshot);
    END IF;
    -- In key order, as every writer of partition rows takes their locks.
    INSERT INTO catalog_partition (table_id, partition_key, partition_values, max_seq)
    SELECT DISTINCT ON (f.partition_key) p_table, f.partition_key, f.partition_values, v_seq
    FROM jsonb_to_recordset(p_files) AS f(partition_key text, partition_values jsonb)
    ORDER BY f.partition_key
    ON CONFLICT (table_id, partition_key) DO UPDATE SET max_seq = EXCLUDED.max_seq;
    INSERT INTO snapshot (table_id, snapshot_id, kind, seq, created_at, summary)
    SELECT p_table, v_snapshot, 'commit', v_seq, v_now, jsonb_build_object(
        'partitions', count(DISTINCT f.partition_key),
        'insert_files', count(*) FILTER (WHERE f.file_type = 'I'),
        'delete_files', count(*) FILTER (WHERE f.file_type = 'D'),
        'inserted_rows', coalesce(sum(f.record_count) FILTER (WHERE f.file_type = 'I'), 0),
        'deleted_rows', coalesce(sum(f.record_count) FILTER (WHERE f.file_type = 'D'), 0),
        'bytes', coalesce(sum(f.size_bytes), 0))
    FROM jsonb_to_recordset(p_files)
        AS f(partition_key text, file_type char(1), record_count bigint, size_bytes bigint);
    INSERT INTO data_file (table_id, partition_key, store, file_type, node_m, node_i, seq,
        path, size_bytes, record_count, min_key, max_key, added_snapshot, key_spans, schema_id)
    SELECT p_table, f.partition_key, 'change', f.file_type, f.node_m, f.node_i, v_seq,
        f.path, f.size_bytes, f.record_count, f.min_key, f.max_key, v_snapshot, f.key_spans,
        f.schema_id
    FROM jsonb_to_recordset(p_files) AS f(partition_key text, file_type char(1),
        node_m integer, node_i integer, path text, size_bytes bigint, record_count bigint,
        min_key jsonb, max_key jsonb, key_spans jsonb, schema_id integer);
    RETURN QUERY SELECT v_seq, v_snapshot, v_now;
END
$$;

-- A streaming writer's micro-batch with no rows: nothing to commit, but done.
CREATE FUNCTION firn_record_empty_batch(p_table bigint, p_query_id text, p_batch_id bigint)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM firn_require_commit(p_table);
    INSERT INTO stream_batch (table_id, query_id, batch_id) VALUES (p_table, p_query_id, p_batch_id)
    ON CONFLICT DO NOTHING;
END
$$;


-- The grants. Functions are executable by PUBLIC unless revoked, and nothing else of
-- the catalog is anyone's but the owner's unless granted here. Every Firn role reads
-- every catalog row (metadata: the data itself is guarded by the warehouse's storage).
DO $$
DECLARE
    schema text := current_schema();
    everyone text := 'firn_reader, firn_producer, firn_metrics, firn_planner, '
        'firn_dispatcher, firn_committer, firn_publisher, firn_operator';
BEGIN
    EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', schema);
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM PUBLIC', schema);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %s', schema, everyone);
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO %s', schema, everyone);
    EXECUTE format('GRANT SELECT ON ALL SEQUENCES IN SCHEMA %I TO %s', schema, everyone);
END
$$;

GRANT EXECUTE ON FUNCTION firn_may_commit(bigint), firn_stage_paths(bigint, text[], text, boolean),
    firn_unstage_paths(bigint, text[]),
    firn_register_commit(bigint, jsonb, text, text, bigint),
    firn_record_empty_batch(bigint, text, bigint)
    TO firn_producer;

-- Each service writes only the rows its work changes. A row lock (SELECT ... FOR
-- UPDATE) needs an UPDATE right on some column of the table.
GRANT INSERT, UPDATE ON service_instance
    TO firn_metrics, firn_planner, firn_dispatcher, firn_committer, firn_publisher;

-- The planner: plans and their tasks; it locks a partition's row to plan against a
-- settled max_merged_seq (the change stamp is the one column it may touch, and the
-- stamping trigger sets that column itself on any update).
GRANT INSERT, UPDATE ON compaction_plan, compaction_task TO firn_planner;
GRANT INSERT ON state_transition TO firn_planner;
GRANT UPDATE (changed) ON catalog_partition TO firn_planner;

-- The dispatcher: claims, leases and results of tasks, their plan's state, and the
-- outputs of failed attempts as orphans. Its lease sweep takes a table row's key-share
-- lock without waiting (SKIP LOCKED), which needs an UPDATE right: on created_at, a
-- column nothing reads for its work.
GRANT UPDATE ON compaction_task, compaction_plan TO firn_dispatcher;
GRANT INSERT ON state_transition, orphan_file TO firn_dispatcher;
GRANT UPDATE (created_at) ON catalog_table TO firn_dispatcher;

-- The committer: a plan's commit (files, snapshot, merged seq, deletion vectors),
-- retention and orphan cleanup.
GRANT INSERT, UPDATE, DELETE ON data_file, snapshot, orphan_file TO firn_committer;
GRANT INSERT, DELETE ON partition_merge_history, state_transition TO firn_committer;
GRANT UPDATE, DELETE ON compaction_plan TO firn_committer;  -- its tasks go by cascade
GRANT UPDATE ON compaction_task TO firn_committer;
GRANT DELETE ON stream_batch TO firn_committer;
GRANT UPDATE (max_merged_seq, last_major_at, changed) ON catalog_partition TO firn_committer;
GRANT UPDATE (last_snapshot) ON catalog_table TO firn_committer;

-- The publisher: the Iceberg views of the tables and pyiceberg's SQL catalog rows.
GRANT INSERT, UPDATE, DELETE ON iceberg_tables, iceberg_publication, iceberg_file
    TO firn_publisher;
GRANT INSERT, DELETE ON iceberg_snapshot TO firn_publisher;
GRANT INSERT ON iceberg_namespace_properties TO firn_publisher;

-- Ids of new rows, and the partition change stamp the partition trigger takes.
GRANT USAGE ON SEQUENCE compaction_plan_plan_id_seq, compaction_task_task_id_seq,
    state_transition_transition_id_seq TO firn_planner;
GRANT USAGE ON SEQUENCE state_transition_transition_id_seq TO firn_dispatcher;
GRANT USAGE ON SEQUENCE data_file_file_id_seq, state_transition_transition_id_seq,
    partition_change_seq TO firn_committer;

-- A later migration that adds a table or a sequence grants it explicitly: the grants
-- above cover what exists now (test_roles checks that every Firn role reads every
-- catalog table).
