"""The Python API (SPEC 10): ``firn.connect``, ``Catalog``, ``Table``, ``firn.compact``."""
