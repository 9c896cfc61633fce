"""The compaction engine: planning, the merge kernel, task execution (locally or
on Spark), the read path and the staging of change files, over model types and
the catalog's repositories."""
