-- When a plan's partition began waiting in the dispatchers' queue (issue 37). A plan
-- replaced by a newer one (more changes came while it waited) hands its place on:
-- the claim priority ages from here, not from the replacement's creation, or a
-- partition that keeps receiving commits would be replanned back to the end of the
-- queue each time and wait longest exactly where the work piles up.
ALTER TABLE compaction_plan ADD COLUMN waiting_since timestamptz;
UPDATE compaction_plan SET waiting_since = created_at;
ALTER TABLE compaction_plan ALTER COLUMN waiting_since SET DEFAULT now();
ALTER TABLE compaction_plan ALTER COLUMN waiting_since SET NOT NULL;
