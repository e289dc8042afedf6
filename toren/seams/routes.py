"""``route_scope``: how a plugin's HTTP route (``register_routes``) says which API-key scope
it needs (docs/guides/auth.md); the server's scope middleware reads it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from toren.core.scopes import SCOPES

#: Any valid key may call the route, whatever its scopes (it checks its own, as ``/mcp``).
AUTHENTICATED = "authenticated"
#: The attribute the scope middleware reads on a route's handler.
SCOPE_ATTRIBUTE = "__toren_scope__"

RouteHandler = Callable[[Any], Awaitable[Any]]


def route_scope(scope: str) -> Callable[[RouteHandler], RouteHandler]:
    """Mark an aiohttp handler as needing ``scope`` (one of ``toren.core.scopes.SCOPES``, or
    ``AUTHENTICATED``)::

        app.router.add_get("/hello", route_scope("runs:read")(hello))

    A plugin route without it needs a key holding every scope (role ``admin``).
    ``ValueError`` for an unknown scope.
    """
    if scope != AUTHENTICATED and scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; one of {', '.join(SCOPES)} or "
                         f"{AUTHENTICATED!r}")

    def mark(handler: RouteHandler) -> RouteHandler:
        @functools.wraps(handler)
        async def scoped(request: Any) -> Any:
            return await handler(request)

        setattr(scoped, SCOPE_ATTRIBUTE, scope)
        return scoped

    return mark
