"""The worker's health endpoint for the container health check (and a target group)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

#: What the endpoint reports: ``(healthy, details)``.
HealthCheck = Callable[[], tuple[bool, dict[str, Any]]]


class HealthServer:
    """``GET /healthz`` on ``host:port``: 200 with the worker's state while it works, 503
    while it drains or once a loop of it died. Anything else is 404; no request body is read.

    Args:
        check: the worker's state, asked on each request.
    """

    def __init__(self, host: str, port: int, check: HealthCheck) -> None:
        self.host, self.port = host, port
        self.check = check
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=1024)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        healthy, details = self.check()
        return web.json_response({"status": "ok" if healthy else "unavailable"} | details,
                                 status=200 if healthy else 503)
