"""``create_app``: the aiohttp application over a started ``toren.Runtime``."""

from __future__ import annotations

from aiohttp import web

import toren
from toren.runtime import Runtime
from toren.server.errors import error_middleware, json_error

RUNTIME = web.AppKey("runtime", Runtime)


def create_app(runtime: Runtime) -> web.Application:
    """The HTTP API for ``runtime`` (which the caller starts and stops)."""
    app = web.Application(middlewares=[error_middleware], client_max_size=1024 * 1024)
    app[RUNTIME] = runtime
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/agents", list_agents)
    app.router.add_get("/agents/{name}", get_agent)
    return app


async def healthz(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    database = await runtime.store.health()
    status = "ok" if database.get("reachable") else "degraded"
    return web.json_response(
        {"status": status, "version": toren.__version__, "database": database},
        status=200 if status == "ok" else 503,
    )


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
