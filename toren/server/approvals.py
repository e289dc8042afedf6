"""Approvals over HTTP: list the tool calls waiting for a person, read one, and decide it:
approve (this call, or ``"scope": "run"`` for every later call with the same arguments),
deny, edit its arguments, or answer in its stead.

The decider is the request's API key (``toren.core.actors.Actor``: agent.yaml's approvers name
it as ``key:<id>`` or ``role:<role>``; records show its name and id); without keys (local
development) it is ``anonymous``. A second decision is ``409`` with the first; a
decision on a digest other than the approval's is ``409 approval_stale`` with the current one.
``digest`` is optional on approve and deny (checked when sent: every Toren surface sends it)
and required on edit and answer, which replace what the model asked for.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from toren.core.approvals import APPROVAL_STATUSES, MAX_REASON_CHARS
from toren.errors import ApprovalAlreadyDecided, ApprovalStale, InvalidApprovalArguments
from toren.host.services.approvals import MAX_APPROVALS_PAGE
from toren.server.auth import request_actor
from toren.server.context import RUNTIME
from toren.server.errors import error_body, json_error
from toren.server.runs import is_uuid, list_filters, read_json_object

#: The body fields each decision route takes, and which of them it requires.
_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "approved": (frozenset({"reason", "digest", "scope"}), frozenset()),
    "denied": (frozenset({"reason", "digest"}), frozenset()),
    "edited": (frozenset({"reason", "digest", "arguments"}), frozenset({"digest", "arguments"})),
    "answered": (frozenset({"reason", "digest", "answer"}), frozenset({"digest", "answer"})),
}


def routes(app: web.Application) -> None:
    app.router.add_get("/approvals", list_approvals)
    app.router.add_get("/approvals/{approval_id}", get_approval)
    app.router.add_post("/approvals/{approval_id}/approve", approve)
    app.router.add_post("/approvals/{approval_id}/deny", deny)
    app.router.add_post("/approvals/{approval_id}/edit", edit)
    app.router.add_post("/approvals/{approval_id}/answer", answer)


async def list_approvals(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    agent, status, limit = list_filters(request, APPROVAL_STATUSES, MAX_APPROVALS_PAGE)
    run_id = request.query.get("run")
    if run_id is not None and not is_uuid(run_id):
        return json_error(400, "invalid_run", "run must be a run id (a UUID)")
    found = await runtime.approvals.list(agent=agent, run_id=run_id, status=status, limit=limit)
    return web.json_response({"approvals": [record.to_json() for record in found]})


async def get_approval(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    record = await runtime.approvals.get(_approval_id(request))
    return web.json_response(record.to_json())


async def approve(request: web.Request) -> web.Response:
    return await _decide(request, "approved")


async def deny(request: web.Request) -> web.Response:
    return await _decide(request, "denied")


async def edit(request: web.Request) -> web.Response:
    return await _decide(request, "edited")


async def answer(request: web.Request) -> web.Response:
    return await _decide(request, "answered")


async def _decide(request: web.Request, outcome: str) -> web.Response:
    """Decide with the route's body (``_FIELDS``); 409 with the first decision if decided,
    409 ``approval_stale`` with the current digest, 422 naming the field of a bad edit."""
    runtime = request.app[RUNTIME]
    approval_id = _approval_id(request)
    allowed, required = _FIELDS[outcome]
    body: dict[str, Any] = await read_json_object(request) if request.can_read_body else {}
    problem = _body_problem(body, allowed, required)
    if problem is not None:
        return json_error(400, "invalid_body", problem)
    try:
        record = await runtime.approvals.decide(
            approval_id, outcome, decided_by=request_actor(request), reason=body.get("reason"),
            digest=body.get("digest"), scope=body.get("scope", "call"),
            arguments=body.get("arguments"), answer=body.get("answer"))
    except ApprovalAlreadyDecided as exc:
        return web.json_response(error_body(exc.code, exc.message) | {"approval": exc.approval},
                                 status=409)
    except ApprovalStale as exc:
        return web.json_response(error_body(exc.code, exc.message)
                                 | {"digest": exc.digest, "approval": exc.approval}, status=409)
    except InvalidApprovalArguments as exc:
        return web.json_response(error_body(exc.code, exc.message) | {"field": exc.field},
                                 status=422)
    return web.json_response(record.to_json())


def _body_problem(body: dict[str, Any], allowed: frozenset[str],
                  required: frozenset[str]) -> str | None:
    """What is wrong with a decision's body, in words for the client (``None``: nothing)."""
    shape = ", ".join(f'"{name}"' for name in sorted(allowed))
    unknown = set(body) - allowed
    if unknown:
        return f"unknown field(s): {', '.join(sorted(unknown))}; the body takes {shape}"
    missing = required - set(body)
    if missing:
        return (f"missing field(s): {', '.join(sorted(missing))} (digest: the one the approval "
                "showed, from GET /approvals/{id})")
    for name in ("reason", "digest", "answer"):
        if name in body and not isinstance(body[name], str):
            return f"'{name}' must be a string (or left out)"
    if body.get("reason") is not None and len(body["reason"]) > MAX_REASON_CHARS:
        return f"'reason' may be at most {MAX_REASON_CHARS} characters"
    if "scope" in body and body["scope"] not in ("call", "run"):
        return "'scope' is \"call\" (this call) or \"run\" (every later call of this tool " \
               "with the same arguments in the run)"
    if "arguments" in body and not isinstance(body["arguments"], dict):
        return "'arguments' must be a JSON object: the tool's arguments, edited"
    return None


def _approval_id(request: web.Request) -> str:
    approval_id = request.match_info["approval_id"]
    if not is_uuid(approval_id):
        raise web.HTTPNotFound(
            text=json_error(404, "approval_not_found",
                            f"no approval {approval_id!r} of an agent served here").text,
            content_type="application/json")
    return approval_id
