-- Where each table's files live: an absolute local path or a URI (s3://...), fixed
-- when the table is created. Data file paths are relative to it, so every process
-- finds a table's files wherever its own FIRN_WAREHOUSE points.
ALTER TABLE catalog_table ADD COLUMN location text NOT NULL DEFAULT '';
ALTER TABLE catalog_table ALTER COLUMN location DROP DEFAULT;
