"""``GET /metrics`` (this process's Prometheus metrics) and ``GET /fleet`` (what ``toren top``
shows); see docs/guides/observability.md."""

from __future__ import annotations

from aiohttp import web

from toren.config import Settings
from toren.host.metrics import CONTENT_TYPE
from toren.server.context import RUNTIME


def public_paths(settings: Settings) -> frozenset[str]:
    """``/metrics`` is served without an API key only with ``TOREN_METRICS_PUBLIC=1``."""
    return frozenset({"/metrics"}) if settings.metrics_public else frozenset()


def routes(app: web.Application) -> None:
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/fleet", fleet)


async def metrics(request: web.Request) -> web.Response:
    """The text exposition format: counters of this process, gauges of the database (queue
    depth, unfinished runs, live workers) read at most every few seconds. Names of agents,
    models, tools and statuses only: no prompts, inputs, outputs or secrets."""
    body = await request.app[RUNTIME].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def fleet(request: web.Request) -> web.Response:
    """Workers, queue, runs in flight and recent failures (``toren.host.fleet``)."""
    return web.json_response(await request.app[RUNTIME].fleet.snapshot())
