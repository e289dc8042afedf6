"""Approvals over HTTP: list the tool calls waiting for a person, read one, approve or deny it.

The decider is the request's API key (its name, as ``toren keys create NAME`` made it); without
keys (local development) it is ``anonymous``. A second decision is ``409`` with the first.
"""

from __future__ import annotations

from aiohttp import web

from toren.core.approvals import APPROVAL_STATUSES, MAX_REASON_CHARS
from toren.errors import ApprovalAlreadyDecided
from toren.host.services.approvals import MAX_APPROVALS_PAGE
from toren.server.auth import API_KEY
from toren.server.context import RUNTIME
from toren.server.errors import error_body, json_error
from toren.server.runs import is_uuid, list_filters, read_json_object

#: Who decides over HTTP when the server runs without API keys (loopback development).
ANONYMOUS = "anonymous"


def routes(app: web.Application) -> None:
    app.router.add_get("/approvals", list_approvals)
    app.router.add_get("/approvals/{approval_id}", get_approval)
    app.router.add_post("/approvals/{approval_id}/approve", approve)
    app.router.add_post("/approvals/{approval_id}/deny", deny)


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


async def _decide(request: web.Request, outcome: str) -> web.Response:
    """``{"reason": "..."}`` (optional) decides; 409 with the first decision if decided."""
    runtime = request.app[RUNTIME]
    approval_id = _approval_id(request)
    reason = None
    if request.can_read_body:
        body = await read_json_object(request)
        unknown = set(body) - {"reason"}
        if unknown:
            return json_error(400, "invalid_body", f"unknown field(s): "
                                                   f"{', '.join(sorted(unknown))}; the body is "
                                                   '{"reason": "..."} (optional)')
        reason = body.get("reason")
        if "reason" in body and not isinstance(reason, str):
            return json_error(400, "invalid_body", "'reason' must be a string (or left out)")
        if reason is not None and len(reason) > MAX_REASON_CHARS:
            return json_error(400, "invalid_body", f"'reason' may be at most "
                                                   f"{MAX_REASON_CHARS} characters")
    key = request.get(API_KEY)
    decided_by = key.name if key is not None else ANONYMOUS
    try:
        record = await runtime.approvals.decide(approval_id, outcome, decided_by=decided_by,
                                                reason=reason)
    except ApprovalAlreadyDecided as exc:
        return web.json_response(error_body(exc.code, exc.message) | {"approval": exc.approval},
                                 status=409)
    return web.json_response(record.to_json())


def _approval_id(request: web.Request) -> str:
    approval_id = request.match_info["approval_id"]
    if not is_uuid(approval_id):
        raise web.HTTPNotFound(
            text=json_error(404, "approval_not_found",
                            f"no approval {approval_id!r} of an agent served here").text,
            content_type="application/json")
    return approval_id

