"""One middleware maps every error to ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from toren.errors import TorenError

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: Seconds a client is asked to wait after a 503 (the database is away): the API serves
#: again as soon as it is back, so this is short.
RETRY_AFTER_S = 2
#: A 503 of one kind is logged at most this often: an outage answers every request with one.
UNAVAILABLE_LOG_EVERY_S = 30.0
#: When a 503 of each error code was last logged (monotonic seconds).
_unavailable_logged: dict[str, float] = {}


def _log_unavailable(exc: TorenError) -> None:
    """Say in the server's log why it answers 503 (the database is unreachable, or out of
    disk space, and what to do), once per ``UNAVAILABLE_LOG_EVERY_S`` per error code."""
    now = time.monotonic()
    if now - _unavailable_logged.get(exc.code, float("-inf")) >= UNAVAILABLE_LOG_EVERY_S:
        _unavailable_logged[exc.code] = now
        log.warning("answering 503 %s: %s", exc.code, exc.message)


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(error_body(code, message), status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        code = exc.reason.lower().replace(" ", "_")
        response = json_error(exc.status, code, exc.text or exc.reason)
        # keep the headers that are not about the body: a 405's Allow, for one
        for name, value in exc.headers.items():
            if name.lower() not in ("content-type", "content-length"):
                response.headers.add(name, value)
        return response
    except json.JSONDecodeError as exc:
        return json_error(400, "invalid_json", f"the request body is not valid JSON: {exc}")
    except TorenError as exc:
        status = exc.http_status or (503 if exc.retryable else 400)
        response = json_error(status, exc.code, exc.message)
        if status == 503:
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
            _log_unavailable(exc)
        return response
    except Exception:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return json_error(500, "internal_error", "internal error; see the server log")
