-- A failed attempt returns its task to Pending with a backoff (design §6): until
-- not_before the task is neither claimed nor re-announced.
ALTER TABLE compaction_task ADD COLUMN not_before timestamptz;
