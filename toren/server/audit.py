"""The audit trail over HTTP: the middleware that records every state-changing route's calls
(allowed, denied and failed), and ``GET /audit`` that reads them (docs/guides/auth.md)."""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from toren.core.audit import OK, AuditEntry, AuditQuery, InvalidAuditQuery, parse_moment
from toren.core.forwarded import client_address
from toren.host.services.audit import AuditNote
from toren.server.auth import request_actor
from toren.server.context import RUNTIME
from toren.server.cursors import decode_audit_cursor, encode_audit_cursor

log = logging.getLogger(__name__)

#: The state-changing routes and the action each records. A route missing here records
#: nothing: tests/integration/test_audit_http.py fails for a POST, PUT, PATCH or DELETE route
#: of the OpenAPI document that is not listed.
ROUTE_ACTIONS: dict[tuple[str, str], str] = {
    ("POST", "/runs"): "run.start",
    ("POST", "/runs/{run_id}/cancel"): "run.cancel",
    ("POST", "/runs/{run_id}/signals/{name}"): "run.signal",
    ("POST", "/runs/{run_id}/fork"): "run.fork",
    ("POST", "/runs/{run_id}/upgrade"): "run.upgrade",
    ("POST", "/runs/{run_id}/restore"): "run.restore",
    ("POST", "/archive"): "run.archive",
    ("POST", "/runs/{run_id}/questions/{question_id}/answer"): "question.answer",
    ("POST", "/approvals/{approval_id}/approve"): "approval.approve",
    ("POST", "/approvals/{approval_id}/deny"): "approval.deny",
    ("POST", "/approvals/{approval_id}/edit"): "approval.edit",
    ("POST", "/approvals/{approval_id}/answer"): "approval.answer",
    ("POST", "/sessions"): "session.create",
    ("POST", "/sessions/{session_id}/messages"): "session.message",
    ("POST", "/files"): "file.upload",
    ("DELETE", "/files/{file_id}"): "file.delete",
    ("PATCH", "/memories/{memory_id}"): "memory.edit",
    ("DELETE", "/memories/{memory_id}"): "memory.delete",
    ("DELETE", "/memories"): "memory.erase_subject",
    ("POST", "/schedules/{agent}/{name}/pause"): "schedule.pause",
    ("POST", "/schedules/{agent}/{name}/resume"): "schedule.resume",
    ("POST", "/schedules/{agent}/{name}/trigger"): "schedule.trigger",
    ("POST", "/evals"): "eval.start",
    ("POST", "/evals/{eval_id}/resume"): "eval.resume",
}
#: Actions whose answer's ``id`` is the run they made.
_MAKES_A_RUN = frozenset({"run.start", "session.create"})
#: What the request's path names, and where an entry keeps it.
_PATH_RUN = ("run_id", "session_id")
_PATH_TARGET = ("approval_id", "question_id", "file_id", "memory_id", "name", "eval_id")
#: A client that says it calls for an MCP tool (toren-mcp's clients send it).
SOURCE_HEADER = "X-Toren-Source"
#: Answers read for what the call made (a run's id): larger ones are not parsed.
_MAX_PARSED = 64 * 1024
#: The query parameters of ``GET /audit``.
_FILTERS = frozenset({"actor", "action", "agent", "run", "outcome", "since", "until", "limit",
                      "cursor"})
#: The request's note: what its handler adds to the entry (``audit_note``).
AUDIT_NOTE = web.RequestKey("audit_note", AuditNote)


def routes(app: web.Application) -> None:
    app.router.add_get("/audit", list_audit)


def audit_note(request: web.Request) -> AuditNote:
    """The note a handler fills for the call's entry (what the path and the answer do not
    say: the agent of ``POST /runs``); a throwaway one on a route that records nothing."""
    note = request.get(AUDIT_NOTE)
    return note if note is not None else AuditNote()


@web.middleware
async def audit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Record the call when the route is one of ``ROUTE_ACTIONS``, after it is answered:
    ``ok``, or the error's code and status (a 403 is recorded as ``forbidden``). A request
    without a valid key (401) is not recorded: it names no actor, and recording it would let
    anyone fill the table. The outermost middleware, so it sees every other one's answer."""
    info = request.match_info.route.resource
    action = ROUTE_ACTIONS.get((request.method, info.canonical)) if info is not None else None
    if action is None:
        return await handler(request)
    note = AuditNote()
    request[AUDIT_NOTE] = note
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        await _record(request, action, note, exc.status, _error_code(exc.text, exc.reason))
        raise
    except BaseException:
        await _record(request, action, note, 500, "internal_error")
        raise
    body = _json_of(response)
    if response.status >= 400:
        error = body.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        code = code if isinstance(code, str) else None
        await _record(request, action, note, response.status, code or str(response.status))
    else:
        _note_answer(note, action, body)
        await _record(request, action, note, response.status, OK)
    return response


def _note_answer(note: AuditNote, action: str, body: dict[str, Any]) -> None:
    """What a successful answer says of what the call acted on or made."""
    if isinstance(body.get("agent"), str):
        note.agent = note.agent or body["agent"]
    if isinstance(body.get("run_id"), str):
        note.run_id = note.run_id or body["run_id"]
    if action in _MAKES_A_RUN and isinstance(body.get("id"), str):
        note.run_id = body["id"]
    elif action in ("file.upload", "eval.start") and isinstance(body.get("id"), str):
        note.target = body["id"]
    elif action == "run.fork" and isinstance(body.get("run"), dict):
        fork = body["run"]
        note.details["fork"] = fork.get("id")
        note.agent = note.agent or fork.get("agent")
    if body.get("closing") is True:
        note.details["close"] = True
    if isinstance(body.get("digest"), str):
        note.details.setdefault("digest", body["digest"])
    if action.startswith(("run.", "session.")) and isinstance(body.get("status"), str):
        note.details.setdefault("status", body["status"])


async def _record(request: web.Request, action: str, note: AuditNote, status: int,
                  outcome: str) -> None:
    if status == 401:
        return
    match = request.match_info
    run_id = next((match[name] for name in _PATH_RUN if name in match), None)
    target = next((match[name] for name in _PATH_TARGET if name in match), None)
    if action == "run.signal":  # the path's name is the signal's, not a target's
        note.details.setdefault("signal", target)
        target = None
    source = "mcp" if request.headers.get(SOURCE_HEADER, "").lower() == "mcp" else "http"
    entry = AuditEntry.of(
        request_actor(request), action, source,
        agent=note.agent or match.get("agent"), run_id=note.run_id or run_id,
        target=note.target or target, outcome=outcome, status=status,
        remote=client_address(request.remote, request.headers.getall("X-Forwarded-For", ()),
                              request.app[RUNTIME].settings.trusted_proxies),
        user_agent=request.headers.get("User-Agent"),
        details=note.details)
    await request.app[RUNTIME].audit.record(entry)


def _json_of(response: web.StreamResponse) -> dict[str, Any]:
    """The answer's JSON object, when it is a small JSON body (else ``{}``)."""
    if not isinstance(response, web.Response) or response.content_type != "application/json":
        return {}
    raw = response.body
    if not isinstance(raw, bytes) or len(raw) > _MAX_PARSED:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _error_code(text: str | None, reason: str) -> str:
    """An HTTP exception's error code: its JSON body's, else its reason's words."""
    try:
        parsed = json.loads(text or "")
        code = parsed["error"]["code"]
        if isinstance(code, str):
            return code
    except (ValueError, KeyError, TypeError):
        pass
    return reason.lower().replace(" ", "_")


async def list_audit(request: web.Request) -> web.Response:
    """``GET /audit``: entries of the audit trail, newest first, a page at a time. Filters:
    ``actor``, ``action`` (or its start), ``agent``, ``run``, ``outcome``, ``since`` and
    ``until`` (an age such as ``1h``, or an ISO 8601 time), ``limit`` (1 to 500), ``cursor``
    (``next_cursor`` of the page before). 400 ``invalid_audit_query`` naming a bad one."""
    query = request.query
    unknown = sorted(set(query) - _FILTERS)
    if unknown:
        raise InvalidAuditQuery(f"unknown query parameter(s): {', '.join(unknown)[:200]}; the "
                                f"filters are {', '.join(sorted(_FILTERS))}")
    try:
        limit = int(query.get("limit", "50"))
    except ValueError:
        raise InvalidAuditQuery("limit must be an integer between 1 and 500") from None
    audit_query = AuditQuery(
        actor=query.get("actor"), action=query.get("action"), agent=query.get("agent"),
        run_id=query.get("run"), outcome=query.get("outcome"),
        since=parse_moment(query["since"], "since") if "since" in query else None,
        until=parse_moment(query["until"], "until") if "until" in query else None,
        limit=limit, before=decode_audit_cursor(query.get("cursor")))
    page = await request.app[RUNTIME].audit.page(audit_query)
    return web.json_response({
        "entries": [record.to_json() for record in page.items],
        "next_cursor": encode_audit_cursor(page.before) if page.before is not None else None})
