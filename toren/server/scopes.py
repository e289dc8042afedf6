"""Which scope each HTTP route needs (``ROUTE_SCOPES``), and the middleware that checks the
request's key against it and against the key's agents (docs/guides/auth.md).

Deny by default: a route of the API missing from the table is refused to every key (and
fails ``tests/integration/test_route_scopes.py``). A plugin's route declares its scope with
``toren.plugin.route_scope``; one that declares none needs a key holding every scope (an
``admin`` key), as every key was before roles.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from toren.core.scopes import SCOPES
from toren.errors import ApprovalNotFound, EvalNotFound, MemoryNotFound, RunNotFound
from toren.keys import ApiKey
from toren.seams.routes import AUTHENTICATED, SCOPE_ATTRIBUTE
from toren.server.auth import API_KEY
from toren.server.context import PUBLIC_DEADLINE, RUNTIME
from toren.server.errors import json_error

log = logging.getLogger(__name__)

#: Served without a key (``toren.server.auth.PUBLIC_PATHS``, the console's assets).
PUBLIC = "public"

#: ``(method, route)`` -> the scope it needs, ``PUBLIC`` or ``AUTHENTICATED``. HEAD is GET's.
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("GET", "/"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/console/{asset}"): PUBLIC,
    ("GET", "/me"): AUTHENTICATED,
    ("GET", "/agents"): "agents:read",
    ("GET", "/agents/{name}"): "agents:read",
    ("GET", "/agents/{name}/versions"): "agents:read",
    ("POST", "/runs"): "runs:write",
    ("GET", "/runs"): "runs:read",
    ("GET", "/runs/{run_id}"): "runs:read",
    ("GET", "/runs/{run_id}/events"): "runs:read",
    ("GET", "/runs/{run_id}/children"): "runs:read",
    ("GET", "/runs/{run_id}/receipt"): "runs:read",
    ("GET", "/runs/{run_id}/webhooks"): "runs:read",
    ("GET", "/runs/{run_id}/diff/{other_id}"): "runs:read",
    ("GET", "/runs/{run_id}/forks"): "runs:read",
    ("GET", "/runs/{run_id}/questions"): "runs:read",
    ("POST", "/runs/{run_id}/cancel"): "runs:write",
    ("POST", "/runs/{run_id}/signals/{name}"): "runs:write",
    ("POST", "/runs/{run_id}/questions/{question_id}/answer"): "approvals:decide",
    ("POST", "/runs/{run_id}/fork"): "runs:manage",
    ("POST", "/runs/{run_id}/upgrade"): "runs:manage",
    ("POST", "/runs/{run_id}/restore"): "runs:manage",
    ("POST", "/archive"): "runs:manage",
    ("GET", "/archived-runs"): "runs:read",
    ("GET", "/costs"): "runs:read",
    ("POST", "/evals"): "runs:write",
    ("GET", "/evals"): "runs:read",
    ("GET", "/evals/{eval_id}"): "runs:read",
    ("POST", "/evals/{eval_id}/resume"): "runs:write",
    ("GET", "/evals/{eval_id}/compare/{other_eval_id}"): "runs:read",
    ("POST", "/sessions"): "sessions:write",
    ("GET", "/sessions/{session_id}"): "sessions:read",
    ("POST", "/sessions/{session_id}/messages"): "sessions:write",
    ("GET", "/approvals"): "approvals:read",
    ("GET", "/approvals/{approval_id}"): "approvals:read",
    ("POST", "/approvals/{approval_id}/approve"): "approvals:decide",
    ("POST", "/approvals/{approval_id}/deny"): "approvals:decide",
    ("POST", "/approvals/{approval_id}/edit"): "approvals:decide",
    ("POST", "/approvals/{approval_id}/answer"): "approvals:decide",
    ("GET", "/schedules"): "schedules:read",
    ("GET", "/schedules/{agent}/{name}"): "schedules:read",
    ("POST", "/schedules/{agent}/{name}/pause"): "schedules:write",
    ("POST", "/schedules/{agent}/{name}/resume"): "schedules:write",
    ("POST", "/schedules/{agent}/{name}/trigger"): "schedules:write",
    ("POST", "/files"): "files:write",
    ("GET", "/files"): "files:read",
    ("GET", "/files/{file_id}"): "files:read",
    ("GET", "/files/{file_id}/content"): "files:read",
    ("DELETE", "/files/{file_id}"): "files:write",
    ("GET", "/memories"): "memory:read",
    ("GET", "/memories/{memory_id}"): "memory:read",
    ("PATCH", "/memories/{memory_id}"): "memory:write",
    ("DELETE", "/memories/{memory_id}"): "memory:write",
    ("DELETE", "/memories"): "memory:write",
    ("GET", "/metrics"): "metrics:read",
    ("GET", "/fleet"): "fleet:read",
    ("GET", "/audit"): "audit:read",
}


#: Routes that change every agent's runs at once: refused to a key limited to some agents.
EVERY_AGENT = frozenset({("POST", "/archive")})


def route_scope(method: str, canonical: str, handler: Any = None) -> str | None:
    """The scope ``method canonical`` needs: the table's, else the plugin handler's
    (``route_scope``), else ``None`` (not declared)."""
    method = "GET" if method == "HEAD" else method
    found = ROUTE_SCOPES.get((method, canonical))
    if found is None and handler is not None:
        found = getattr(handler, SCOPE_ATTRIBUTE, None)
    return found


def forbidden(message: str) -> web.Response:
    """403 ``forbidden`` with the message saying which scope is missing."""
    return json_error(403, "forbidden", message)


def _missing_scope_message(request: web.Request, scope: str, key: ApiKey) -> str:
    held = ", ".join(sorted(key.granted)) or "none"
    return (f"{request.method} {request.path} needs the scope {scope}; this key "
            f"({key.name!r}, role {key.role}) has: {held}. Use a key with that scope "
            "(toren keys create NAME --role ...)")


def scope_middleware() -> Middleware:
    """Checks the request's key (``API_KEY``, set by the auth middleware before this one)
    against ``ROUTE_SCOPES`` and the key's agents. Without a key (keys not required, or a
    public path) nothing is checked here."""

    @web.middleware
    async def require_scope(request: web.Request, handler: Handler) -> web.StreamResponse:
        key = request.get(API_KEY)
        route = request.match_info.route
        resource = route.resource
        if key is None or resource is None or request.get(PUBLIC_DEADLINE) is not None:
            # keyless; 404/405 (the router answers); or a public path (a key is optional)
            return await handler(request)
        scope = route_scope(request.method, resource.canonical, route.handler)
        if scope == PUBLIC:
            return await handler(request)
        if scope is None:
            if resource.canonical.startswith("/channels/"):  # a channel's own webhook
                return await handler(request)
            if _is_plugin_route(request, route.handler):
                if key.granted != frozenset(SCOPES):
                    return forbidden(f"{request.method} {request.path} is a plugin's route "
                                     "that declares no scope: only a key holding every scope "
                                     f"(role admin) may call it; this key has role {key.role}")
                return await handler(request)
            log.error("route %s %s has no scope in toren.server.scopes.ROUTE_SCOPES",
                      request.method, resource.canonical)
            return forbidden(f"{request.method} {resource.canonical} has no scope declared: "
                             "refused (deny by default)")
        if scope != AUTHENTICATED and scope not in key.granted:
            return forbidden(_missing_scope_message(request, scope, key))
        if key.agents is None:
            return await handler(request)
        if (request.method, resource.canonical) in EVERY_AGENT:
            return forbidden(f"{request.method} {resource.canonical} acts on every agent; this "
                             f"key is limited to {', '.join(key.agents)}: use a key not "
                             "limited to agents")
        hidden = await _hidden_object(request, key)
        if hidden is not None:
            return hidden
        response = await handler(request)
        return _filter_listing(request, response, key)

    return require_scope


def _is_plugin_route(request: web.Request, handler: Any) -> bool:
    module = getattr(handler, "__module__", "") or ""
    return not module.startswith("toren.server")


# --- keys limited to some agents (``toren keys create --agent``) ---------------------------
# Objects of other agents answer 404 as if they did not exist (their existence is not
# leaked); listings leave them out.

_NOT_FOUND = {
    "run_id": ("run_not_found", "no run {value!r} of an agent served here"),
    "session_id": ("session_not_found", "no session {value!r} of an agent served here"),
    "approval_id": ("approval_not_found", "no approval {value!r} of an agent served here"),
    "memory_id": ("memory_not_found", "no memory has the id {value!r}"),
    "name": ("not_found", "no agent named {value!r} is served here"),
    "agent": ("not_found", "no agent named {value!r} is served here"),
    "eval_id": ("eval_not_found", "no eval {value!r} of an agent served here"),
}


async def _hidden_object(request: web.Request, key: ApiKey) -> web.Response | None:
    """404 if the request names (in its path, its ``agent`` query or its body's ``agent``)
    an agent or an object of an agent the key may not touch; else ``None``."""
    runtime = request.app[RUNTIME]
    info = request.match_info
    canonical = request.match_info.route.resource.canonical  # type: ignore[union-attr]
    for field in ("name", "agent"):
        if field in info and (canonical.startswith("/agents/")
                              or canonical.startswith("/schedules/")):
            if field == "name" and canonical.startswith("/schedules/"):
                continue  # a schedule's name, not an agent's
            if not key.may_touch(info[field]):
                return _not_found(field, info[field])
    for field in ("run_id", "session_id", "other_id"):
        value = info.get(field)
        if value is not None and _is_uuid(value):
            try:  # archived runs too: get_run reads the archive index
                record = await runtime.get_run(value)
            except RunNotFound:
                continue  # the handler answers 404
            if not key.may_touch(record.agent):
                return _not_found("session_id" if field == "session_id" else "run_id", value)
    owned: tuple[tuple[tuple[str, ...], Callable[[str], Awaitable[Any]], type[Exception]], ...] = (
        (("eval_id", "other_eval_id"), runtime.evals.get, EvalNotFound),
        (("approval_id",), runtime.approvals.get, ApprovalNotFound),
        (("memory_id",), runtime.memory.get, MemoryNotFound),
    )
    for fields, read, missing in owned:
        for field in fields:
            value = info.get(field)
            if value is None or not _is_uuid(value):
                continue
            try:
                found = await read(value)
            except missing:
                continue  # the handler answers 404
            if found is not None and not key.may_touch(found.agent):
                return _not_found(fields[0], value)
    agent = request.query.get("agent")
    if agent is not None and not key.may_touch(agent):
        return _not_found("agent", agent)
    if request.method == "POST" and request.can_read_body and canonical in ("/runs",
                                                                           "/sessions",
                                                                           "/evals"):
        try:
            body = json.loads(await request.read() or b"null")
        except (ValueError, UnicodeDecodeError):
            return None  # the handler answers 400
        if isinstance(body, dict) and isinstance(body.get("agent"), str) \
                and not key.may_touch(body["agent"]):
            return _not_found("agent", body["agent"])
    return None


def _not_found(field: str, value: str) -> web.Response:
    code, message = _NOT_FOUND[field]
    return json_error(404, code, message.format(value=value[:100]))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


#: Listing routes and how to read each item's agent.
_LISTINGS: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    "/agents": ("agents", lambda item: item.get("name")),
    "/runs": ("runs", lambda item: item.get("agent")),
    "/archived-runs": ("runs", lambda item: item.get("agent")),
    "/approvals": ("approvals", lambda item: item.get("agent")),
    "/schedules": ("schedules", lambda item: item.get("agent")),
    "/memories": ("memories", lambda item: item.get("agent")),
    "/evals": ("evals", lambda item: item.get("agent")),
}


def _filter_listing(request: web.Request, response: web.StreamResponse,
                    key: ApiKey) -> web.StreamResponse:
    """A listing's JSON without the items of agents the key may not touch."""
    route = request.match_info.route.resource
    listing = _LISTINGS.get(route.canonical if route is not None else "")
    if listing is None or request.method != "GET" or not isinstance(response, web.Response) \
            or response.status != 200 or response.body is None:
        return response
    field, agent_of = listing
    assert isinstance(response.body, bytes)
    body = json.loads(response.body)
    if isinstance(body.get(field), list):
        body[field] = [item for item in body[field]
                       if isinstance(item, dict) and key.may_touch(str(agent_of(item)))]
    filtered = web.json_response(body, status=response.status)
    for name, value in response.headers.items():
        if name.lower() not in ("content-type", "content-length"):
            filtered.headers[name] = value
    return filtered
