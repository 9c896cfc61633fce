"""The keyed table format: schema rules, the hash tree, commits and merge-on-read."""
