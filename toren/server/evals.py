"""Evals over HTTP: start one against an agent served here, resume it, read its report, compare
two, list them (docs/guides/evals.md, "Over HTTP").

An eval started here is worked by a task of this process (its case runs are queued like any run
of the agent, for the workers serving it); a process that stops leaves it ``running``, and
``POST /evals/{eval_id}/resume`` (or ``toren eval resume``) goes on with it. Working the same
eval twice at once is safe: each case run is claimed once in the database.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from aiohttp import web

from toren.agents.datasets import dataset_from_json
from toren.core.evals import EvalRecord
from toren.errors import EvalNotFound, TorenError
from toren.host.services.evals import MAX_CONCURRENCY, MAX_REPEAT
from toren.server.context import RUNTIME
from toren.server.cursors import InvalidCursor
from toren.server.errors import json_error
from toren.server.runs import read_json_object

log = logging.getLogger(__name__)

#: The fields ``POST /evals`` takes.
_FIELDS = ("agent", "dataset", "repeat", "concurrency", "grader_model")
#: Evals listed per page at most.
MAX_PAGE = 200
#: The evals this process is working, by id.
WORKING = web.AppKey("evals_working", dict)


def routes(app: web.Application) -> None:
    app[WORKING] = {}
    app.on_shutdown.append(_stop_working)
    app.router.add_post("/evals", start_eval)
    app.router.add_get("/evals", list_evals)
    app.router.add_get("/evals/{eval_id}", get_eval)
    app.router.add_post("/evals/{eval_id}/resume", resume_eval)
    app.router.add_get("/evals/{eval_id}/compare/{other_eval_id}", compare_evals)


async def _stop_working(app: web.Application) -> None:
    """Stop the evals being worked here: their runs go on, and a resume picks them up."""
    tasks = list(app[WORKING].values())
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _work(app: web.Application, record: EvalRecord) -> bool:
    """Work the eval in a task of this process unless one already does; whether one was
    started."""
    working: dict[str, asyncio.Task[Any]] = app[WORKING]
    if record.id in working:
        return False

    async def work() -> None:
        try:
            await app[RUNTIME].evals.work(record.id)
        except asyncio.CancelledError:
            raise
        except TorenError as exc:  # the eval stays running: a resume goes on with it
            log.warning("eval %s stopped: %s (POST /evals/%s/resume goes on with it)",
                        record.id, exc.message, record.id)
        except Exception:
            log.exception("eval %s stopped", record.id)
        finally:
            working.pop(record.id, None)

    working[record.id] = asyncio.create_task(work(), name=f"eval {record.id}")
    return True


def _bad_body(message: str) -> web.Response:
    return json_error(400, "invalid_body", message)


async def start_eval(request: web.Request) -> web.Response:
    """Body ``{"agent", "dataset": {"name"?, "description"?, "graders"?, "cases": [...]},
    "repeat"?, "concurrency"?, "grader_model"?}``; 202 with the eval, being worked here."""
    runtime = request.app[RUNTIME]
    body = await read_json_object(request)
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        return _bad_body(f"unknown field(s): {', '.join(unknown)}; the body is "
                         f"{{{', '.join(_FIELDS)}}} (agent and dataset required)")
    agent = body.get("agent")
    if not isinstance(agent, str) or not agent:
        return _bad_body("'agent' is required: the name of an agent served here")
    if agent not in runtime.agents:
        return json_error(404, "not_found", f"no agent named {agent[:100]!r} is served here")
    if "dataset" not in body:
        return _bad_body("'dataset' is required: {\"cases\": [{\"input\": ...}, ...]}")
    numbers = {}
    for name, default, top in (("repeat", 1, MAX_REPEAT), ("concurrency", 4, MAX_CONCURRENCY)):
        value = body.get(name, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            return _bad_body(f"{name!r} must be an integer from 1 to {top}")
        numbers[name] = value
    grader_model = body.get("grader_model")
    if grader_model is not None and (not isinstance(grader_model, str) or not grader_model):
        return _bad_body("'grader_model' must be a model id")
    dataset = dataset_from_json(body["dataset"], where="dataset")
    if any(g.kind == "function" for case in dataset.cases for g in case.graders):
        return json_error(400, "eval_dataset_error", "dataset: function: graders run code "
                          "from an evals.py, which the server does not take; run this eval "
                          "with `toren eval run` (other graders work here)")
    record = await runtime.evals.create(dataset, agent, grader_model=grader_model,
                                        source="POST /evals", repeat=numbers["repeat"],
                                        concurrency=numbers["concurrency"])
    _work(request.app, record)
    return web.json_response(record.to_json(), status=202)


async def resume_eval(request: web.Request) -> web.Response:
    """Go on with an eval (its cases without a grade) in a task of this process; 202 with
    the eval. 409 when this server serves another version of its agent."""
    runtime = request.app[RUNTIME]
    record = await _eval(request, "eval_id")
    spec = runtime.agents.get(record.agent)
    if spec is None or spec.version is None or spec.version.hash != record.version:
        return json_error(409, "eval_mismatch", f"eval {record.id} runs version "
                          f"{record.version[:12]} of {record.agent}, which this server does "
                          "not serve; resume it with `toren eval resume` (it loads that "
                          "version from the database)")
    started = _work(request.app, record)
    return web.json_response(record.to_json() | {"working": True, "started": started},
                             status=202)


async def _eval(request: web.Request, name: str) -> EvalRecord:
    """The eval named by path part ``name``, of an agent served here; 404 otherwise."""
    runtime = request.app[RUNTIME]
    eval_id = request.match_info[name]
    try:
        record = await runtime.evals.get(str(uuid.UUID(eval_id)))
    except (ValueError, EvalNotFound):
        record = None
    if record is None or record.agent not in runtime.agents:
        raise EvalNotFound(f"no eval {eval_id[:100]!r} of an agent served here")
    return record


async def get_eval(request: web.Request) -> web.Response:
    """The eval's report: what ``toren eval report --json`` prints."""
    record = await _eval(request, "eval_id")
    report = await request.app[RUNTIME].evals.report(record.id)
    report["working"] = record.id in request.app[WORKING]
    return web.json_response(report)


async def compare_evals(request: web.Request) -> web.Response:
    """What changed from eval A to eval B: what ``toren eval compare --json`` prints."""
    a = await _eval(request, "eval_id")
    b = await _eval(request, "other_eval_id")
    return web.json_response(await request.app[RUNTIME].evals.compare(a.id, b.id))


async def list_evals(request: web.Request) -> web.Response:
    """``?agent=&limit=&cursor=``: evals of the served agents, newest first, with
    ``next_cursor`` (the last one's id) while there may be more."""
    runtime = request.app[RUNTIME]
    query = request.query
    unknown = sorted(set(query) - {"agent", "limit", "cursor"})
    if unknown:
        return json_error(400, "invalid_query", f"unknown parameter(s): {', '.join(unknown)}; "
                          "GET /evals takes agent, limit and cursor")
    try:
        limit = int(query.get("limit", "50"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_PAGE:
        return json_error(400, "invalid_query", f"limit must be an integer from 1 to "
                          f"{MAX_PAGE}")
    agent = query.get("agent")
    if agent is not None and agent not in runtime.agents:
        return json_error(404, "not_found", f"no agent named {agent[:100]!r} is served here")
    cursor = query.get("cursor")
    if cursor is not None:
        try:
            cursor = str(uuid.UUID(cursor))
        except ValueError:
            raise InvalidCursor("cursor must be the next_cursor of a previous page of "
                                "GET /evals") from None
    found: list[EvalRecord] = []
    before = cursor
    # evals of agents not served here are skipped: read on until the page is full
    while len(found) < limit + 1:
        page = await runtime.evals.list(agent=agent, limit=limit + 1, before=before)
        found += [e for e in page if e.agent in runtime.agents]
        if len(page) < limit + 1:
            break
        before = page[-1].id
    more = len(found) > limit
    items = found[:limit]
    return web.json_response({"evals": [e.to_json() for e in items],
                              "next_cursor": items[-1].id if more and items else None})
