"""Compaction: triggers, plans, task state machines (the pure core; adapters elsewhere)."""
