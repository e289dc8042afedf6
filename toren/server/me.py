"""``GET /me``: who the caller is and what its key may do, so that the console hides what it
may not do and a client can check before it asks."""

from __future__ import annotations

from aiohttp import web

from toren.core.actors import ANONYMOUS, Actor
from toren.core.scopes import SCOPES
from toren.server.auth import API_KEY


def routes(app: web.Application) -> None:
    app.router.add_get("/me", me)


async def me(request: web.Request) -> web.Response:
    """The caller's key (id, name, prefix, role, scopes, agents, expiry) and actor; without
    keys (keyless local development) the anonymous actor, holding every scope."""
    key = request.get(API_KEY)
    if key is None:
        return web.json_response({"actor": ANONYMOUS.to_json(), "key": None,
                                  "role": None, "scopes": sorted(SCOPES), "agents": None,
                                  "expires_at": None, "keys_required": False})
    return web.json_response({"actor": Actor.of_key(key).to_json(), "key": key.id,
                              "name": key.name, "prefix": key.prefix, "role": key.role,
                              "scopes": sorted(key.granted),
                              "agents": list(key.agents) if key.agents is not None else None,
                              "expires_at": key.expires_at.isoformat() if key.expires_at
                              else None, "keys_required": True})
