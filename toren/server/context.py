"""Typed keys for what the aiohttp application and its requests hold."""

from __future__ import annotations

from aiohttp import web

from toren.host.runtime import Runtime

RUNTIME = web.AppKey("runtime", Runtime)
#: Whether the request passed the Host, Origin and Sec-Fetch-Site checks (``guard``).
BROWSER_CHECKS_PASSED = web.RequestKey("browser_checks_passed", bool)
#: Whether the caller may see what only operators should (``/healthz``'s details): it sent a
#: valid API key, or keys are off and the request passed the browser checks.
TRUSTED = web.RequestKey("trusted", bool)
#: When (``loop.time()``) a public route must have its answer from the database: the request's
#: arrival plus ``TOREN_POOL_TIMEOUT``, so that ``/healthz`` answers a load balancer within the
#: pool timeout however its key check and its own queries share that time.
PUBLIC_DEADLINE = web.RequestKey("public_deadline", float)
