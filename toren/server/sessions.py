"""Sessions over HTTP: open one, send it messages (one turn at a time), read its transcript.

A session is also a run: its events stream from ``GET /runs/{id}/events`` and
``POST /runs/{id}/cancel`` stops it mid-turn.
"""

from __future__ import annotations

from aiohttp import web

from toren.core.sessions import MAX_MESSAGE_CHARS
from toren.seams.telemetry import parse_traceparent
from toren.server.audit import audit_note
from toren.server.context import RUNTIME
from toren.server.errors import json_error
from toren.server.runs import idempotency_key, read_agent_body, read_json_object, webhooks_of


def routes(app: web.Application) -> None:
    app.router.add_post("/sessions", create_session)
    app.router.add_get("/sessions/{session_id}", get_session)
    app.router.add_post("/sessions/{session_id}/messages", post_message)


async def create_session(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    body = await read_agent_body(request, (), ("webhook", "subject"))
    audit_note(request).agent = body["agent"]
    session_id = await runtime.sessions.start(
        body["agent"], idempotency_key=idempotency_key(request),
        traceparent=parse_traceparent(request.headers.get("traceparent")),
        webhooks=webhooks_of(body), subject=body.get("subject"))
    record = await runtime.get_run(session_id)
    return web.json_response({"id": record.id, "status": record.status}, status=201)


async def get_session(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    return web.json_response(await runtime.sessions.get(request.match_info["session_id"]))


async def post_message(request: web.Request) -> web.Response:
    """``{"text": ...}`` starts the agent's turn; ``{"close": true}`` ends the session.
    Either is 409 while the agent is mid-turn (``session_busy``) or after the session ended
    (``session_ended``)."""
    runtime = request.app[RUNTIME]
    session_id = request.match_info["session_id"]
    body = await read_json_object(request)
    unknown = set(body) - {"text", "close", "files"}
    if unknown or ("text" in body) == ("close" in body):
        return json_error(400, "invalid_body", "the body is {\"text\": \"...\"} to send a "
                                               "message or {\"close\": true} to close the session")
    if "close" in body:
        if "files" in body:
            return json_error(400, "invalid_body", "files are attached to a message, not to "
                                                   "closing a session")
        if body["close"] is not True:
            return json_error(400, "invalid_body", "'close' must be true")
        await runtime.sessions.close(session_id, "closed over HTTP")
        return web.json_response({"id": session_id, "status": "running", "closing": True},
                                 status=202)
    text = body["text"]
    if not isinstance(text, str) or not (text.strip() or body.get("files")):
        return json_error(400, "invalid_body", "'text' must be a non-empty string (it may be "
                                               "empty when files are sent)")
    if len(text) > MAX_MESSAGE_CHARS:
        return json_error(400, "invalid_body", f"'text' may be at most {MAX_MESSAGE_CHARS} "
                                               f"characters; this has {len(text)}")
    turn = await runtime.sessions.send(session_id, text, files=body.get("files"),
                                       idempotency_key=idempotency_key(request))
    return web.json_response({"id": session_id, "status": "running", "turn": turn}, status=202)
