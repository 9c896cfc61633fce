-- A commit's right to its table, checked with less machinery (issue 37). Staging and
-- registering a commit each checked it through two SECURITY DEFINER functions, each
-- call of which sets and restores the search path: 0.5 ms a check under a fleet's
-- load (pg_stat_statements, bench/fleet.py --statements), a third of a small commit's
-- time in the catalog. Only the catalog's own definer functions call it (no one else
-- may execute it), and they run as the owner with the catalog's search path set, so
-- it needs neither. The rule is firn_may_commit's, which stays for the clients that
-- ask it.
CREATE OR REPLACE FUNCTION firn_require_commit(p_table bigint) RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER AS $$
BEGIN
    IF NOT (pg_has_role(session_user, current_user, 'MEMBER')
            OR EXISTS (
                SELECT 1 FROM table_grant g JOIN pg_roles r ON r.rolname = g.role_name
                WHERE g.table_id = p_table AND pg_has_role(session_user, r.oid, 'MEMBER')))
    THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = format('role %s may not commit to table %s', session_user,
                coalesce((SELECT name FROM catalog_table WHERE table_id = p_table),
                         p_table::text)),
            HINT = 'the catalog''s admin grants it: firn grant TABLE ROLE';
    END IF;
END
$$;
