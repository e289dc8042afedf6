"""Bearer API keys on the HTTP API: when keys are required, the start-up check, the middleware."""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from toren.core.actors import ANONYMOUS, Actor
from toren.errors import DatabaseUnavailable
from toren.host.services import KeysService
from toren.keys import ApiKey, NoApiKeys
from toren.server.context import BROWSER_CHECKS_PASSED, PUBLIC_DEADLINE, TRUSTED
from toren.server.errors import error_body

log = logging.getLogger(__name__)

#: Paths anyone may read: load balancers probe the first, clients fetch the second. A valid
#: key is optional on them; ``/healthz`` shows its details only with one.
PUBLIC_PATHS = frozenset({"/", "/healthz", "/openapi.json"})
#: Paths under this prefix are public too: the console's scripts and styles (no data).
PUBLIC_PREFIX = "/console/"
#: Channels' webhooks (``Channel.routes``): each authenticates its caller itself (a signature
#: or a secret token), since a chat platform holds no Toren key.
CHANNEL_PREFIX = "/channels/"


def is_public(path: str) -> bool:
    """Whether ``path`` is served without a key (``PUBLIC_PATHS``, the console's assets)."""
    return (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)
            or path.startswith(CHANNEL_PREFIX))
#: How long a verified key is trusted without asking the database again; also the longest a
#: revoked key keeps working on a running server.
CACHE_TTL_S = 5.0
#: The key that authenticated the request (absent when keys are not required).
API_KEY = web.RequestKey("api_key", ApiKey)

Command = Literal["dev", "serve"]


def request_actor(request: web.Request) -> Actor:
    """Who made ``request``: its key's actor, or ``ANONYMOUS`` when keys are not required
    (records show ``actor.label``: the key's name and id)."""
    key = request.get(API_KEY)
    return Actor.of_key(key) if key is not None else ANONYMOUS


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only accepts connections from this machine.

    ``localhost``, 127.0.0.0/8 and ::1 are; any other name is not, since it may resolve to
    anything (and an empty host binds every interface).
    """
    name = host.strip().strip("[]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "") not in ("", "0")


def keys_required(command: Command, host: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether serving on ``host`` requires API keys (deny by default outside local dev).

    ``toren dev`` on a loopback address runs without keys unless ``TOREN_REQUIRE_KEYS=1``.
    Any other address, and ``toren serve`` anywhere, requires them; ``toren serve`` on a
    loopback address may opt out with ``TOREN_ALLOW_NO_KEYS=1`` for local testing.

    Args:
        command: ``"dev"`` or ``"serve"``.
        host: the interface to bind.
        env: the environment to read (default ``os.environ``).
    """
    env = os.environ if env is None else env
    if _flag(env, "TOREN_REQUIRE_KEYS") or not is_loopback(host):
        return True
    return command == "serve" and not _flag(env, "TOREN_ALLOW_NO_KEYS")


async def refuse_without_keys(keys: KeysService, command: Command, host: str,
                              env: Mapping[str, str] | None = None) -> None:
    """Raise ``NoApiKeys`` (one line) if keys are required on ``host`` and none is active.

    Call it after the store is open and before listening.
    """
    env = os.environ if env is None else env
    if not keys_required(command, host, env):
        return
    if await keys.active():
        return
    message = (f"no API keys exist: create one with `toren keys create NAME` before serving "
               f"on {host}")
    if command == "serve" and is_loopback(host) and not _flag(env, "TOREN_REQUIRE_KEYS"):
        message += " (or set TOREN_ALLOW_NO_KEYS=1 to try it locally without keys)"
    raise NoApiKeys(message)


#: Verifies a presented key: its record if it is an active key, else ``None``.
VerifyKey = Callable[[str], Awaitable[ApiKey | None]]


class KeyCache:
    """Keys verified in the last ``ttl_s`` seconds, by the SHA-256 of the presented key.

    Only successes are kept, so a key created a moment ago works at once, and a revoked key
    stops working within ``ttl_s``.
    """

    max_entries = 1024

    def __init__(self, verify: VerifyKey, ttl_s: float = CACHE_TTL_S) -> None:
        self._verify = verify
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[ApiKey, float]] = {}

    async def verify(self, token: str) -> ApiKey | None:
        """The record of ``token`` if it is an active key (cached, or asked of ``verify``)."""
        digest = hashlib.sha256(token.encode()).hexdigest()  # no plaintext keys in memory
        now = time.monotonic()
        cached = self._entries.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        key = await self._verify(token)
        if key is None:
            self._entries.pop(digest, None)
            return None
        if len(self._entries) >= self.max_entries:
            self._entries = {d: entry for d, entry in self._entries.items() if entry[1] > now}
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
        self._entries[digest] = (key, now + self.ttl_s)
        return key


class KeyCheck:
    """Re-checks the key that authenticated a long request (a live event stream) while the
    request is still open: through the same cache, so it asks the database at most once per
    ``CACHE_TTL_S`` per key however many streams use it."""

    def __init__(self, cache: KeyCache, token: str) -> None:
        self._cache = cache
        self._token = token

    async def still_active(self) -> bool:
        """Whether the key is still active; raises what the store raises when it cannot
        tell (the database is unreachable)."""
        key = await self._cache.verify(self._token)
        return key is not None and not key.expired


#: How to re-check the request's key (absent when keys are not required).
KEY_CHECK = web.RequestKey("key_check", KeyCheck)


def unauthorized(message: str) -> web.Response:
    """401 with the JSON error body and the challenge RFC 6750 asks for."""
    return web.json_response(error_body("unauthorized", message), status=401,
                             headers={"WWW-Authenticate": "Bearer"})


def auth_middleware(verify: VerifyKey, *, enabled: bool = True,
                    cache_ttl_s: float = CACHE_TTL_S,
                    public_paths: frozenset[str] = frozenset(),
                    public_timeout_s: float = 5.0) -> Middleware:
    """A middleware requiring ``Authorization: Bearer <key>`` on all but ``PUBLIC_PATHS``.

    Args:
        verify: a key's record if it is active, else ``None`` (``KeysService.verify``:
            the store must be open by the first request).
        enabled: ``False`` lets every request through (``keys_required`` said no).
        cache_ttl_s: how long a verified key is trusted without a query.
        public_paths: more paths served without a key (``/metrics`` with
            ``TOREN_METRICS_PUBLIC=1``).
        public_timeout_s: how long a public route may take over the database, its optional
            key check included (``TOREN_POOL_TIMEOUT``): ``PUBLIC_DEADLINE`` of the request.
    """
    cache = KeyCache(verify, cache_ttl_s)

    async def optional_key(header: str, deadline: float) -> ApiKey | None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        try:
            # within the route's deadline: a key check waiting out the pool timeout in an
            # outage left /healthz nothing of it for its own check (7 s for a 503)
            async with asyncio.timeout_at(deadline):
                return await cache.verify(token.strip())
        except (DatabaseUnavailable, TimeoutError):  # /healthz then says so, without details
            return None

    @web.middleware
    async def require_api_key(request: web.Request, handler: Handler) -> web.StreamResponse:
        public = is_public(request.path) or request.path in public_paths
        if public:
            request[PUBLIC_DEADLINE] = asyncio.get_running_loop().time() + public_timeout_s
        if not enabled:
            request[TRUSTED] = request.get(BROWSER_CHECKS_PASSED, True)
            return await handler(request)
        header = request.headers.get("Authorization", "")
        if public:
            # a key is optional here: a valid one shows what only operators should see
            key = await optional_key(header, request[PUBLIC_DEADLINE]) if header else None
            if key is not None and key.expired:
                key = None
            if key is not None:
                request[API_KEY] = key
            request[TRUSTED] = key is not None
            return await handler(request)
        if not header:
            return unauthorized("this API needs an API key: send `Authorization: Bearer <key>` "
                                "(create one with `toren keys create NAME`)")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return unauthorized("the Authorization header must be `Bearer <key>`")
        key = await cache.verify(token.strip())
        if key is None or key.expired:  # a cached key may pass its expiry within the TTL
            log.info("rejected an invalid, revoked or expired API key for %s %s",
                     request.method, request.path)
            # one message for all: an unauthenticated caller learns nothing of which it was
            return unauthorized("the API key is not valid: it is unknown, malformed, revoked "
                                "or expired")
        request[API_KEY] = key
        request[TRUSTED] = True
        request[KEY_CHECK] = KeyCheck(cache, token.strip())
        return await handler(request)

    return require_api_key
