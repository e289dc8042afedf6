"""Agent versions over HTTP: ``GET /agents/{name}/versions``, ``POST /runs/{run_id}/upgrade``."""

from __future__ import annotations

from aiohttp import web

from toren.server.auth import request_actor
from toren.server.context import RUNTIME
from toren.server.errors import json_error
from toren.server.runs import refuse_a_body, served_run


def routes(app: web.Application) -> None:
    app.router.add_get("/agents/{name}/versions", agent_versions)
    app.router.add_post("/runs/{run_id}/upgrade", upgrade_run)


async def agent_versions(request: web.Request) -> web.Response:
    """Every kept version of an agent served here, newest first, with its runs counted."""
    runtime = request.app[RUNTIME]
    name = request.match_info["name"]
    if name not in runtime.agents:
        return json_error(404, "agent_not_found", f"no agent named {name[:100]!r} is served "
                                                  "here")
    return web.json_response(await runtime.agent_versions(name))


async def upgrade_run(request: web.Request) -> web.Response:
    """Move the run to the version of its agent this server serves (``Runtime.upgrade_run``).
    A body, if sent, is an empty JSON object."""
    record = await served_run(request)
    await refuse_a_body(request)
    result = await request.app[RUNTIME].upgrade_run(
        record.id, requested_by=request_actor(request).label)
    return web.json_response(result)
