"""The Python API (design §10): ``firn.connect``, ``Catalog``, ``Table``, ``firn.compact``."""
