"""The table model: schemas, keys, the hash tree, files, plans and tasks as plain
data, and the pure rules over them (merge, triggers, state machines). Imports
nothing of Firn's but ``firn.errors`` and ``firn.units``."""
