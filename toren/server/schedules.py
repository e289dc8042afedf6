"""Schedules over HTTP: list, read, pause, resume and trigger (``schedules:`` in agent.yaml)."""

from __future__ import annotations

import json

from aiohttp import web

from toren.server.context import RUNTIME
from toren.server.errors import error_body, json_error
from toren.server.runs import SCHEDULE_NAME, read_json_object


def routes(app: web.Application) -> None:
    app.router.add_get("/schedules", list_schedules)
    app.router.add_get("/schedules/{agent}/{name}", get_schedule)
    app.router.add_post("/schedules/{agent}/{name}/pause", pause_schedule)
    app.router.add_post("/schedules/{agent}/{name}/resume", resume_schedule)
    app.router.add_post("/schedules/{agent}/{name}/trigger", trigger_schedule)


def _not_found(code: str, message: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(text=json.dumps(error_body(code, message)),
                            content_type="application/json")


async def _target(request: web.Request) -> tuple[str, str]:
    """The agent and schedule a request names, both checked; a body, if any, must be a JSON
    object (none is needed)."""
    agent, name = request.match_info["agent"], request.match_info["name"]
    if agent not in request.app[RUNTIME].agents:
        raise _not_found("agent_not_found", f"no agent named {agent[:100]!r} is served here")
    if not SCHEDULE_NAME.match(name):
        raise _not_found("schedule_not_found", f"{name[:100]!r} is not a schedule name: "
                         "lowercase letters, digits, - and _, starting with a letter")
    if request.method == "POST" and request.can_read_body:
        await read_json_object(request)
    return agent, name


async def list_schedules(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    agent = request.query.get("agent")
    if agent is not None and agent not in runtime.agents:
        return json_error(404, "agent_not_found", f"no agent named {agent[:100]!r} is served "
                                                  "here")
    schedules = await runtime.schedules.list(agent)
    return web.json_response({"schedules": [s.to_json() for s in schedules]})


async def get_schedule(request: web.Request) -> web.Response:
    agent, name = await _target(request)
    return web.json_response((await request.app[RUNTIME].schedules.get(agent, name)).to_json())


async def pause_schedule(request: web.Request) -> web.Response:
    agent, name = await _target(request)
    return web.json_response((await request.app[RUNTIME].schedules.pause(agent, name)).to_json())


async def resume_schedule(request: web.Request) -> web.Response:
    agent, name = await _target(request)
    record = await request.app[RUNTIME].schedules.resume(agent, name)
    return web.json_response(record.to_json())


async def trigger_schedule(request: web.Request) -> web.Response:
    agent, name = await _target(request)
    fired = await request.app[RUNTIME].schedules.trigger(agent, name)
    return web.json_response({"agent": fired.agent, "schedule": fired.schedule,
                              "run_id": fired.run_id, "slot_at": fired.slot_at.isoformat(),
                              "trigger": fired.trigger}, status=201)
