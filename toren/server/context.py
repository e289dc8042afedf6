"""Typed keys for what the aiohttp application holds."""

from __future__ import annotations

from aiohttp import web

from toren.host.runtime import Runtime

RUNTIME = web.AppKey("runtime", Runtime)
