"""Signals over HTTP: ``POST /runs/{run_id}/signals/{name}``, the body the payload."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from toren.core.decisions import unstorable
from toren.execution.signals import MAX_SIGNAL_BYTES, SIGNAL_NAME
from toren.server.auth import API_KEY, request_actor
from toren.server.context import RUNTIME
from toren.server.errors import json_error
from toren.server.runs import _not_json, _read_body, idempotency_key, served_run


def routes(app: web.Application) -> None:
    app.router.add_post("/runs/{run_id}/signals/{name}", send_signal)


async def send_signal(request: web.Request) -> web.Response:
    """Send the signal: 201 with ``{"run_id", "name", "number", "created", "status"}`` (200
    and the first signal's number for a repeated ``Idempotency-Key``); 404 for an unknown
    run, 409 ``run_finished``, 413 past ``MAX_SIGNAL_BYTES``."""
    name = request.match_info["name"]
    if not SIGNAL_NAME.fullmatch(name):
        return json_error(400, "invalid_signal_name",
                          f"invalid signal name {name[:120]!r}: use lowercase letters, "
                          "digits, - and _, starting with a letter (at most 64 characters)")
    record = await served_run(request)
    key = idempotency_key(request)
    payload: Any = None
    if request.can_read_body:
        if request.content_length is not None and request.content_length > MAX_SIGNAL_BYTES:
            return _too_large(request.content_length)
        raw = await _read_body(request)
        if raw.strip():
            if request.content_type != "application/json":
                return json_error(415, "unsupported_media_type",
                                  "send the payload as JSON with `Content-Type: "
                                  f"application/json` (this request's is "
                                  f"{request.content_type!r})")
            if len(raw) > MAX_SIGNAL_BYTES:
                return _too_large(len(raw))
            try:
                payload = json.loads(raw.decode("utf-8"), parse_constant=_not_json)
            except (ValueError, RecursionError) as exc:
                return json_error(400, "invalid_json", f"the request body is not valid JSON: "
                                                       f"{exc}")
            problem = unstorable(payload)
            if problem:
                return json_error(400, "unstorable_value",
                                  f"the signal's payload cannot be stored: {problem}")
    api_key = request.get(API_KEY)
    sent = await request.app[RUNTIME].signals.send(
        record.id, name, payload, idempotency_key=key,
        sent_by=request_actor(request).label if api_key is not None else None)
    return web.json_response(sent, status=201 if sent["created"] else 200)


def _too_large(size: int) -> web.Response:
    return json_error(413, "signal_too_large",
                      f"a signal's payload may be at most {MAX_SIGNAL_BYTES} bytes of JSON; "
                      f"this one has {size}. Send a reference (a file id, a URL) instead")
