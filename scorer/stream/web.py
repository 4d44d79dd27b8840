"""HTTP views of the worker (read-only): liveness and readiness."""

from __future__ import annotations

from typing import Any

import faust
from faust.web import Request, Response, View


def is_ready(app: faust.App) -> tuple[bool, str]:
    """Ready once the tables are recovered and partitions are assigned and consumed."""
    if not app.tables.recovery.completed.is_set():
        return False, "recovering tables"
    if app.rebalancing:
        return False, "rebalancing"
    if not app.consumer.assignment():
        return False, "no partitions assigned yet"
    return True, "consuming"


def register_views(app: faust.App, **_tables: Any) -> None:
    """Add ``/healthz`` and ``/readyz`` to the app's web server."""

    @app.page("/healthz")
    async def healthz(web: View, request: Request) -> Response:
        return web.json({"status": "alive"})

    @app.page("/readyz")
    async def readyz(web: View, request: Request) -> Response:
        ready, reason = is_ready(app)
        return web.json({"ready": ready, "status": reason}, status=200 if ready else 503)
