-- Retention (design §7). A snapshot older than the table's snapshot.retention (and not
-- the current one) is marked expired before the files only it could read are deleted,
-- so reading it fails with a clear error instead of a missing file. The rows of
-- expired data files are deleted after their files; no retained snapshot can see them.
ALTER TABLE snapshot ADD COLUMN expired_at timestamptz;
