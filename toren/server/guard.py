"""Requests a web page made a browser send: a foreign ``Host`` (DNS rebinding) and a cross-site
``Origin`` or ``Sec-Fetch-Site`` (cross-site request forgery) are refused with 403.

Without API keys (``toren dev`` on loopback) the browser of the person running Toren is the
only credential, so any page it opens could drive the API: the ``Host`` must name this
machine or a configured name (``TOREN_ALLOWED_HOSTS``), and a request a browser marks as
coming from another origin is refused. With keys, a page has no key to send; a request a
browser marks ``Sec-Fetch-Site: cross-site`` is still refused, since no page elsewhere has
business with this API (it sends no CORS headers).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from yarl import URL

from toren.server.auth import is_loopback, is_public
from toren.server.context import BROWSER_CHECKS_PASSED
from toren.server.errors import json_error

log = logging.getLogger(__name__)

#: Host names every keyless server answers to, besides any loopback address.
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_host_names(bound_host: str, configured: Iterable[str] = ()) -> frozenset[str]:
    """The names a keyless server answers to: loopback, the bound address, ``configured``."""
    names = {normalize_name(name) for name in (*LOCAL_NAMES, bound_host, *configured)}
    return frozenset(name for name in names if name)


def normalize_name(name: str) -> str:
    return name.strip().strip("[]").lower().rstrip(".")


def split_host(value: str) -> tuple[str, int | None] | None:
    """The name and port of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), the
    name lower-cased; ``None`` if it is malformed."""
    value = value.strip()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    else:
        name, _, port = value.partition(":")
        if ":" in port:
            return None
    name = normalize_name(name)
    if not name or (port and not (port.isascii() and port.isdigit() and int(port) < 65536)):
        return None
    return name, int(port) if port else None


def _same_origin(origin: str, host: tuple[str, int | None]) -> bool:
    """Whether ``origin`` (an ``Origin`` header) is the origin the request was sent to."""
    try:
        url = URL(origin)
    except ValueError:
        return False
    if url.scheme not in ("http", "https") or not url.host or url.path not in ("", "/"):
        return False
    name, port = host
    if port is None:  # the scheme's default port, as for the origin
        port = 443 if url.scheme == "https" else 80
    return (normalize_name(url.host), url.port) == (name, port)


def refusal(request: web.BaseRequest, *, keys_required: bool,
            allowed_hosts: frozenset[str]) -> tuple[str, str] | None:
    """Why ``request`` looks sent by a page on another site: ``(code, message)``, or ``None``."""
    fetch_site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
    if fetch_site == "cross-site":
        return ("cross_site_request", "a web page on another site sent this request "
                "(Sec-Fetch-Site: cross-site); call the API from a script, the CLI or the "
                "Toren client instead")
    if keys_required:
        return None
    raw_host = request.headers.get("Host")
    host = split_host(raw_host) if raw_host is not None else None
    if raw_host is not None and (host is None or not (host[0] in allowed_hosts
                                                      or is_loopback(host[0]))):
        return ("host_not_allowed", f"this server answers to {', '.join(sorted(allowed_hosts))} "
                f"without API keys, not to Host {raw_host[:100]!r}; add the name to "
                "TOREN_ALLOWED_HOSTS if it is yours")
    if fetch_site == "same-site":
        return ("cross_site_request", "a web page on another origin of this site sent this "
                "request (Sec-Fetch-Site: same-site); without API keys only pages served by "
                "Toren itself may call the API")
    origin = request.headers.get("Origin")
    if origin is not None and (host is None or not _same_origin(origin, host)):
        return ("cross_site_request", f"a web page on another origin ({origin[:100]}) sent this "
                "request; without API keys only pages served by Toren itself may call the API")
    return None


def browser_guard_middleware(*, keys_required: bool,
                             allowed_hosts: frozenset[str]) -> Middleware:
    """A middleware refusing with 403 what ``refusal`` finds, except on ``PUBLIC_PATHS``
    (which learn whether the request passed, as ``BROWSER_CHECKS_PASSED``)."""

    @web.middleware
    async def refuse_cross_site(request: web.Request, handler: Handler) -> web.StreamResponse:
        problem = refusal(request, keys_required=keys_required, allowed_hosts=allowed_hosts)
        request[BROWSER_CHECKS_PASSED] = problem is None
        if problem is None or is_public(request.path):
            return await handler(request)
        code, message = problem
        log.info("refused %s %s: %s (Host %r, Origin %r)", request.method, request.path,
                    code, request.headers.get("Host"), request.headers.get("Origin"))
        return json_error(403, code, message)

    return refuse_cross_site
