-- A trivial move (issue 15) registers a change file again as a base file under the
-- same path: one snapshot removes the change row and adds the base row. So a path
-- may now have several rows, but never more than one live; retention deletes a path
-- only once no row that is still kept names it (firn.catalog.expiry).
ALTER TABLE data_file DROP CONSTRAINT data_file_path_key;
CREATE UNIQUE INDEX data_file_live_path ON data_file (path) WHERE removed_snapshot IS NULL;
-- Lookups by path (orphan checks, retention) stay indexed.
CREATE INDEX data_file_path ON data_file (path);
