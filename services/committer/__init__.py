"""The committer service: commits whole plans atomically, expires files."""
