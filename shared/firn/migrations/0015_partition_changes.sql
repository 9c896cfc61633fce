-- What changed since the metrics service's last periodic check (issue 37: its cost
-- follows the changes, not the catalog). Every insert or update of a partition row
-- (a commit, a load, a compaction commit, which touches the row it locks) stamps it
-- with the next value of one sequence; a change of a table's properties or schema
-- stamps the table. The check reads partitions stamped after its last one, those
-- with unmerged changes (time triggers), and every partition of a stamped table.
CREATE SEQUENCE partition_change_seq;

ALTER TABLE catalog_partition ADD COLUMN changed bigint NOT NULL DEFAULT 0;
CREATE INDEX catalog_partition_changed ON catalog_partition (changed);
CREATE INDEX catalog_partition_unmerged ON catalog_partition (table_id)
    WHERE max_seq > max_merged_seq;

CREATE FUNCTION firn_stamp_partition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed := nextval('partition_change_seq');
    RETURN NEW;
END
$$;
CREATE TRIGGER catalog_partition_stamp BEFORE INSERT OR UPDATE ON catalog_partition
    FOR EACH ROW EXECUTE FUNCTION firn_stamp_partition();

ALTER TABLE catalog_table ADD COLUMN definition_changed bigint NOT NULL DEFAULT 0;
CREATE INDEX catalog_table_definition_changed ON catalog_table (definition_changed);

CREATE FUNCTION firn_stamp_table() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.properties IS DISTINCT FROM OLD.properties
       OR NEW.schema_id IS DISTINCT FROM OLD.schema_id THEN
        NEW.definition_changed := nextval('partition_change_seq');
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER catalog_table_stamp BEFORE UPDATE ON catalog_table
    FOR EACH ROW EXECUTE FUNCTION firn_stamp_table();
