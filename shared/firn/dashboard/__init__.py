"""The read-only web dashboard (``firn dashboard``, also started by ``firn up``)."""

from firn.dashboard.server import Dashboard, DashboardServer, serve

__all__ = ["Dashboard", "DashboardServer", "serve"]
