"""The ``firn`` commands that work on tables (``table``, ``status``, ``tasks``,
``compact``, ``expire``, ``verify``): one module per command family, each adding its parsers and
returning an ``Output`` that ``firn.cli`` prints as text or JSON."""
