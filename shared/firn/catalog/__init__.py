"""The system catalog in Postgres: repositories of tables, partitions, snapshots,
files, plans and tasks that take and return model types."""
