-- Deletion vectors (firn.io.deletion_vectors): a base file may carry the positions of
-- rows later compactions hid without rewriting it. The vector is a file of its own,
-- recorded on the base file's row; a new vector for the same base file is a new row
-- for the same path (as a trivial move is), so each snapshot reads the vector it had.
ALTER TABLE data_file
    ADD COLUMN dv_path text,
    ADD COLUMN dv_size_bytes bigint,
    ADD COLUMN dv_rows bigint,
    ADD CONSTRAINT data_file_deletion_vector CHECK (
        (dv_path IS NULL AND dv_size_bytes IS NULL AND dv_rows IS NULL)
        OR (store = 'base' AND dv_size_bytes >= 0 AND dv_rows > 0 AND dv_rows <= record_count)
    );
-- Orphan checks and retention look vectors up by path, as they do data files.
CREATE INDEX data_file_dv_path ON data_file (dv_path) WHERE dv_path IS NOT NULL;
