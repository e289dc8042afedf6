"""``create_app``: the aiohttp application over a started ``toren.Runtime``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from aiohttp import web

import toren
from toren.errors import DatabaseUnavailable
from toren.schemas import load_schema
from toren.server import (
    approvals,
    console,
    costs,
    evals,
    files,
    forks,
    me,
    memory,
    observability,
    questions,
    runs,
    schedules,
    sessions,
    signals,
    versions,
)
from toren.server import archive as archive_routes
from toren.server import audit as audit_routes
from toren.server.auth import auth_middleware
from toren.server.context import PUBLIC_DEADLINE, RUNTIME, TRUSTED
from toren.server.errors import RETRY_AFTER_S, error_middleware, json_error
from toren.server.guard import allowed_host_names, browser_guard_middleware
from toren.server.scopes import scope_middleware
from toren.server.streams import STREAMS, StreamHub

log = logging.getLogger(__name__)

#: Request bodies larger than this are refused with 413 before they are read.
MAX_BODY_BYTES = 1024 * 1024


def create_app(runtime: toren.Runtime, *, require_keys: bool = True,
               bound_host: str = "127.0.0.1", allowed_hosts: Iterable[str] = ()
               ) -> web.Application:
    """The HTTP API for ``runtime`` (which the caller starts and stops).

    Each route needs the scope ``toren.server.scopes.ROUTE_SCOPES`` names; a key limited to
    some agents sees and touches only theirs.

    With ``require_keys`` every route but ``/healthz`` and ``/openapi.json`` needs
    ``Authorization: Bearer <key>`` (``toren.server.auth.keys_required`` decides). Without,
    only requests for ``bound_host``, loopback names and ``allowed_hosts`` that no page on
    another origin sent are served (``toren.server.guard``). Plugins' ``register_routes``
    add their routes (toren-mcp's ``/mcp``) behind the same checks.
    """
    guard = browser_guard_middleware(keys_required=require_keys,
                                     allowed_hosts=allowed_host_names(bound_host, allowed_hosts))
    app = web.Application(
        # the audit trail's outermost: it records what every other one answered
        middlewares=[audit_routes.audit_middleware, error_middleware, guard,
                     auth_middleware(runtime.keys.verify, enabled=require_keys,
                                     public_paths=observability.public_paths(runtime.settings),
                                     public_timeout_s=runtime.settings.pool_timeout_s),
                     scope_middleware()],
        client_max_size=MAX_BODY_BYTES)
    app[RUNTIME] = runtime
    app[STREAMS] = StreamHub(runtime.runs.reader, runtime.live,
                             max_per_key=runtime.settings.max_streams_per_key)
    # live event streams never end by themselves: end them first, so that stopping waits for
    # no open request (aiohttp awaits on_shutdown before it waits for handlers to finish)
    app.on_shutdown.append(_end_streams)
    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/agents", list_agents)
    app.router.add_get("/agents/{name}", get_agent)
    me.routes(app)
    runs.routes(app)
    signals.routes(app)
    sessions.routes(app)
    files.routes(app)
    approvals.routes(app)
    questions.routes(app)
    memory.routes(app)
    schedules.routes(app)
    forks.routes(app)
    costs.routes(app)
    evals.routes(app)
    versions.routes(app)
    archive_routes.routes(app)
    audit_routes.routes(app)
    console.routes(app)
    for channel in runtime.listed_channels():  # webhooks of chat apps (docs/channels/)
        channel.routes(app, runtime.channel_context)
    observability.routes(app)  # /metrics, /fleet (docs/guides/observability.md)
    # routes of plugins, behind the same middlewares (toren-mcp's /mcp: docs/channels/mcp.md)
    runtime.plugins.add_routes(app, runtime)
    return app


async def _end_streams(app: web.Application) -> None:
    await app[STREAMS].close()


async def healthz(request: web.Request) -> web.Response:
    """``status`` and ``version_skew`` for anyone (a load balancer); the version, database
    and live workers only for a trusted caller (a valid key, or keyless local use).

    It answers within ``TOREN_POOL_TIMEOUT`` of the request's arrival (``PUBLIC_DEADLINE``),
    key check included: in a database outage, a ``503`` a load balancer can act on."""
    runtime = request.app[RUNTIME]
    deadline = request.get(PUBLIC_DEADLINE)
    if deadline is None:  # served by an application without the auth middleware
        deadline = asyncio.get_running_loop().time() + runtime.settings.pool_timeout_s
    workers: list[dict[str, object]] = []
    rows: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout_at(deadline):
            database = await runtime.fleet.health()
            if database.get("reachable"):
                rows = await runtime.fleet.live_workers()
    except TimeoutError:
        database = {"reachable": False, "error": "the database did not answer within "
                                                 f"{runtime.settings.pool_timeout_s:g}s "
                                                 "(TOREN_POOL_TIMEOUT)"}
    except DatabaseUnavailable as exc:  # gone since the health check
        database = {"reachable": False, "error": exc.message}
    for row in rows:
        workers.append({"id": row["id"], "version": row["version"],
                        "agents": list(row["agents"]), "hostname": row["hostname"],
                        "pid": row["pid"], "started_at": row["started_at"].isoformat(),
                        "last_heartbeat": row["heartbeat_at"].isoformat(),
                        "lane": row.get("lane") or "all",
                        "supervisor": row.get("supervisor")})
    versions = sorted({str(worker["version"]) for worker in workers})
    healthy = bool(database.get("reachable"))
    body: dict[str, object] = {"status": "ok" if healthy else "degraded",
                               "version_skew": len(versions) > 1}
    if request.get(TRUSTED):
        body |= {"version": toren.__version__, "database": database, "workers": workers,
                 "versions": versions}
        queue = await _queue_depth(runtime, deadline) if healthy else None
        if queue is not None:
            body["queue"] = queue
    if healthy:
        return web.json_response(body)
    return web.json_response(body, status=503, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _queue_depth(runtime: toren.Runtime, deadline: float
                       ) -> dict[str, dict[str, int]] | None:
    """Messages per served agent, or ``None`` if the queue cannot say by ``deadline`` (or is
    unreachable)."""
    if runtime.queue is None:
        return None
    try:
        async with asyncio.timeout_at(deadline):
            return await runtime.queue.depth(list(runtime.agents))
    except Exception as exc:  # health must answer even when the count fails
        log.debug("could not count the queue: %s", exc)
        return None


async def index(request: web.Request) -> web.Response:
    """The console (a web page) for a browser (``Accept: text/html``); for anyone else,
    what is served here: where the API is described, and where health is."""
    if console.wants_html(request):
        return console.console_page()
    return web.json_response({
        "name": "toren", "version": toren.__version__,
        "api": "/openapi.json", "health": "/healthz",
        "console": "/",
        "message": "This is a Toren API server. The API is described at /openapi.json; "
                   "requests other than these need Authorization: Bearer <key> when keys "
                   "are required (see docs/channels/http-api.md).",
    })


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(load_schema("openapi.json"))


async def list_agents(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    return web.json_response({"agents": [agent.to_json() for agent in runtime.agents.values()]})


async def get_agent(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    agent = runtime.agents.get(request.match_info["name"])
    if agent is None:
        return json_error(404, "not_found", f"no agent named {request.match_info['name']!r} "
                          "is served here")
    return web.json_response(agent.to_json())
