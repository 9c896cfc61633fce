-- Producer commits by seq: the committer reads the commits a plan merged (seq in
-- (from_merged_seq, max_merged_seq]) to observe commit-to-compacted latency, and the
-- demo's progress does the same. Without it each lookup filtered every snapshot of
-- the table, a cost growing with its history (0.1-0.6 s per plan after two minutes
-- at ten commits a second, on the committer's one thread).
CREATE INDEX snapshot_commit_seq ON snapshot (table_id, seq) WHERE kind = 'commit';
