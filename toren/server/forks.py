"""Forks over HTTP: fork a run at a step, and diff two runs (docs/guides/fork-and-replay.md)."""

from __future__ import annotations

import uuid

from aiohttp import web

from toren.core.runs import RunRecord
from toren.errors import RunNotFound
from toren.server.context import RUNTIME
from toren.server.errors import json_error
from toren.server.runs import read_json_object

#: The fields ``POST /runs/{id}/fork`` takes, and the JSON type each must have.
_FORK_FIELDS = {"at_step": "an integer from 0 up", "prompt": "a string (the system prompt)",
                "model": "a string (a model id)"}


def routes(app: web.Application) -> None:
    app.router.add_post("/runs/{run_id}/fork", fork_run)
    app.router.add_get("/runs/{run_id}/diff/{other_id}", diff_runs)
    app.router.add_get("/runs/{run_id}/forks", list_forks)


async def _served(request: web.Request, name: str) -> RunRecord:
    """The run named by path part ``name``; 404 when unknown or of an agent not served here."""
    runtime = request.app[RUNTIME]
    run_id = request.match_info[name]
    try:
        record = await runtime.get_run(str(uuid.UUID(run_id)))
    except (ValueError, RunNotFound):
        record = None
    if record is None or record.agent not in runtime.agents:
        raise RunNotFound(f"no run {run_id!r} of an agent served here")
    return record


async def fork_run(request: web.Request) -> web.Response:
    """Body ``{"at_step": N, "prompt"?: text, "model"?: id}``; 201 with ``{"run", "fork"}``."""
    runtime = request.app[RUNTIME]
    source = await _served(request, "run_id")
    body = await read_json_object(request)
    unknown = sorted(set(body) - set(_FORK_FIELDS))
    if unknown:
        return json_error(400, "invalid_body", f"unknown field(s): {', '.join(unknown)}; the "
                          'body is {"at_step", "prompt", "model"} (prompt and model optional)')
    at_step = body.get("at_step")
    if "at_step" not in body:
        return json_error(400, "invalid_body", "'at_step' is required: the step (or wave) to "
                          "fork at, an integer from 0 up")
    if isinstance(at_step, float) and at_step.is_integer():
        at_step = int(at_step)  # 2.0 is an integer to JSON Schema, as to JavaScript
    if isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0:
        return json_error(400, "invalid_body", f"'at_step' must be {_FORK_FIELDS['at_step']}")
    for name in ("prompt", "model"):
        if name in body and not isinstance(body[name], str):
            return json_error(400, "invalid_body", f"{name!r} must be {_FORK_FIELDS[name]}")
    record = await runtime.forks.fork(source.id, at_step, prompt=body.get("prompt"),
                                      model=body.get("model"))
    return web.json_response({"run": record.to_json(),
                              "fork": await runtime.forks.fork_of(record.id)}, status=201)


async def diff_runs(request: web.Request) -> web.Response:
    """Where two runs diverge: the first differing step and every step side by side."""
    runtime = request.app[RUNTIME]
    a = await _served(request, "run_id")
    b = await _served(request, "other_id")
    return web.json_response(await runtime.forks.diff(a.id, b.id))


async def list_forks(request: web.Request) -> web.Response:
    """The forks made from a run, oldest first: ``{"forks": [run, ...]}``; 501 from a store
    that does not list forks."""
    source = await _served(request, "run_id")
    try:
        forks = await request.app[RUNTIME].forks.forks_of(source.id)
    except NotImplementedError as exc:
        return json_error(501, "not_supported", f"{exc}: use a store driver that does "
                          "(toren-postgres)")
    return web.json_response({"forks": [fork.to_json() for fork in forks]})
