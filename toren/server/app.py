"""``create_app``: the aiohttp application over a started ``toren.Runtime``."""

from __future__ import annotations

from aiohttp import web

import toren
from toren.schemas import load_schema
from toren.server import runs, sessions
from toren.server.auth import auth_middleware
from toren.server.context import RUNTIME
from toren.server.errors import error_middleware, json_error
from toren.server.streams import STREAMS, StreamHub

#: Request bodies larger than this are refused with 413 before they are read.
MAX_BODY_BYTES = 1024 * 1024


def create_app(runtime: toren.Runtime, *, require_keys: bool = True) -> web.Application:
    """The HTTP API for ``runtime`` (which the caller starts and stops).

    With ``require_keys`` every route but ``/healthz`` and ``/openapi.json`` needs
    ``Authorization: Bearer <key>`` (``toren.server.auth.keys_required`` decides).
    """
    app = web.Application(
        middlewares=[error_middleware, auth_middleware(runtime.store, enabled=require_keys)],
        client_max_size=MAX_BODY_BYTES)
    app[RUNTIME] = runtime
    app[STREAMS] = StreamHub(runtime.store, max_per_key=runtime.settings.max_streams_per_key)
    # live event streams never end by themselves: end them first, so that stopping waits for
    # no open request (aiohttp awaits on_shutdown before it waits for handlers to finish)
    app.on_shutdown.append(_end_streams)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/agents", list_agents)
    app.router.add_get("/agents/{name}", get_agent)
    runs.routes(app)
    sessions.routes(app)
    return app


async def _end_streams(app: web.Application) -> None:
    await app[STREAMS].close()


def live_window_s(runtime: toren.Runtime) -> float:
    """A worker whose last heartbeat is older than this is not counted as live."""
    return max(10.0, 3 * runtime.settings.lease_ttl_s)


async def healthz(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    database = await runtime.store.health()
    workers: list[dict[str, object]] = []
    if database.get("reachable"):
        for row in await runtime.store.live_workers(live_window_s(runtime)):
            workers.append({"id": row["id"], "version": row["version"],
                            "agents": list(row["agents"]), "hostname": row["hostname"],
                            "pid": row["pid"], "started_at": row["started_at"].isoformat(),
                            "last_heartbeat": row["heartbeat_at"].isoformat()})
    versions = sorted({str(worker["version"]) for worker in workers})
    status = "ok" if database.get("reachable") else "degraded"
    return web.json_response(
        {"status": status, "version": toren.__version__, "database": database,
         "workers": workers, "versions": versions, "version_skew": len(versions) > 1},
        status=200 if status == "ok" else 503,
    )


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
