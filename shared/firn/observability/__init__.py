"""Prometheus metrics of the Firn services (docs/operations/monitoring.md).

``instruments`` defines every counter, gauge and histogram a service updates, in one
place (the one seam business code calls); ``catalog_collector`` reads the
per-table and per-partition figures from the catalog when Prometheus scrapes the
metrics service; ``endpoint`` serves a registry over HTTP.
"""
