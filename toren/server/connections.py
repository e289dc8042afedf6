"""Connection limits of the HTTP server, so slow or idle clients cannot hold every file
descriptor: how long a client may take to send a request's headers
(``TOREN_HEADER_TIMEOUT``), how long an idle keep-alive connection stays open
(``TOREN_IDLE_TIMEOUT``), and how many connections are open at once
(``TOREN_MAX_CONNECTIONS``). The body's timeout is the JSON body reader's
(``toren.server.runs``).

aiohttp has no header timeout or connection cap of its own; these subclasses of its server
and request handler add them at the protocol level, before any request reaches the app. They
build on aiohttp names that are not public API (``PRIVATE_AIOHTTP_NAMES``), so pyproject.toml
pins aiohttp to the minor releases they were checked on, a unit test fails when an installed
aiohttp lacks one of them, and a server refuses to start with a clear error if one is missing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from dataclasses import dataclass
from typing import Any

from aiohttp import __version__ as aiohttp_version
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from toren.config import Settings
from toren.errors import ConfigError
from toren.server.errors import error_body

log = logging.getLogger(__name__)

#: File descriptors kept for everything but open client connections: database connections,
#: the queue listener, files that tools and plugins open, and the connections asyncio
#: accepts in one go (up to the listen backlog, 128) before any of them can be counted.
RESERVED_DESCRIPTORS = 256
#: Seconds between two log lines about the connection limit, however often it is hit.
LIMIT_LOG_INTERVAL_S = 60.0
#: What this module uses of aiohttp beyond its public API, by class: checked on aiohttp 3.10
#: to 3.14 (the range pyproject.toml allows). Widen the pin only after checking them again.
PRIVATE_AIOHTTP_NAMES = {web.AppRunner: ("_make_server",),
                         web.Server: ("_kwargs", "_loop", "request_factory",
                                      "handler_cancellation"),
                         RequestHandler: ("_handle_request", "_loop", "force_close")}
#: The answer to a connection beyond the limit when none can be closed to make room.
_REFUSED_BODY = json.dumps(error_body("too_many_connections", "the server is at its "
                                      "connection limit (TOREN_MAX_CONNECTIONS); retry "
                                      "shortly")).encode()
REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
           b"Retry-After: 1\r\nConnection: close\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(_REFUSED_BODY), _REFUSED_BODY))


@dataclass(frozen=True)
class ConnectionLimits:
    """What ``LimitedAppRunner`` enforces."""

    header_timeout_s: float = 10.0
    idle_timeout_s: float = 75.0
    max_connections: int = 1000

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        return cls(header_timeout_s=settings.header_timeout_s,
                   idle_timeout_s=settings.idle_timeout_s,
                   max_connections=fit_descriptor_limit(settings.max_connections))


def fit_descriptor_limit(wanted: int) -> int:
    """``wanted`` connections if the process may open that many files besides
    ``RESERVED_DESCRIPTORS`` (raising its soft limit up to the hard one if needed, as Go's
    runtime does), else as many as fit, with a warning."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + RESERVED_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    fitting = max(1, soft - RESERVED_DESCRIPTORS)
    log.warning("TOREN_MAX_CONNECTIONS=%d does not fit this process's open-file limit (%d): "
                "serving at most %d connections; raise the limit (ulimit -n) to serve more",
                wanted, soft, fitting)
    return fitting


class LimitedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server enforces ``limits``."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=limits.idle_timeout_s, **kwargs)
        self.limits = limits

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        if not hasattr(server, "_kwargs"):
            raise ConfigError(f"aiohttp {aiohttp_version} changed what Toren's connection "
                              "limits build on (checked on aiohttp 3.10 to 3.14): install "
                              "aiohttp<3.15 (pip install 'aiohttp>=3.10,<3.15'), or a Toren "
                              "release that supports this aiohttp")
        # the same server, made by our class: the app's handler and request factory, and the
        # handler options aiohttp collected (private, but what its own __call__ passes on)
        return _LimitedServer(server.request_handler, limits=self.limits,
                              request_factory=server.request_factory,
                              handler_cancellation=server.handler_cancellation,
                              loop=asyncio.get_running_loop(), **server._kwargs)


class _LimitedServer(web.Server):
    """Counts open connections; at the limit it closes the one that has waited longest for
    a request (a stalled or idle client), or refuses the new one if every one is busy."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._open: dict[_LimitedHandler, None] = {}
        self._closed_for_room = 0
        self._refused = 0
        self._last_log = -LIMIT_LOG_INTERVAL_S

    def __call__(self) -> _LimitedHandler:
        return _LimitedHandler(self, loop=self._loop, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        assert isinstance(handler, _LimitedHandler)
        if len(self._open) >= self.limits.max_connections and not self._make_room():
            self._refused += 1
            self._log_limit()
            transport.write(REFUSED)
            handler.force_close()  # closes the transport once the answer is written
            return
        self._open[handler] = None
        super().connection_made(handler, transport)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self._open.pop(handler, None)  # type: ignore[call-overload]
        super().connection_lost(handler, exc)

    def _make_room(self) -> bool:
        waiting = [handler for handler in self._open if not handler.busy]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda handler: handler.waiting_since)
        del self._open[oldest]
        oldest.force_close()
        self._closed_for_room += 1
        self._log_limit()
        return True

    def _log_limit(self) -> None:
        now = self._loop.time()
        if now - self._last_log < LIMIT_LOG_INTERVAL_S:
            return
        self._last_log = now
        log.warning("HTTP connection limit reached (%d open, TOREN_MAX_CONNECTIONS): closed %d "
                    "connections waiting for a request and refused %d new ones since the last "
                    "report; serve behind a reverse proxy, or raise the limit",
                    len(self._open), self._closed_for_room, self._refused)
        self._closed_for_room = self._refused = 0


class _LimitedHandler(RequestHandler):
    """aiohttp's request handler with a deadline for each request's headers: from the
    connection's start for the first request, from its first byte for the next ones (the
    time in between is the idle timeout's). A request being handled has no deadline here."""

    def __init__(self, manager: _LimitedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout_s = manager.limits.header_timeout_s
        self._header_deadline: asyncio.TimerHandle | None = None
        self.busy = False
        self.waiting_since = self._loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.transport is not None:  # else the server refused it
            self._start_header_deadline()

    def data_received(self, data: bytes) -> None:
        if not self.busy and self._header_deadline is None and self.transport is not None:
            self._start_header_deadline()
        super().data_received(data)

    async def _handle_request(self, request: Any, start_time: Any,
                              request_handler: Any) -> Any:
        # the headers are in: a handler's time is its own (the body has TOREN_BODY_TIMEOUT)
        self._cancel_header_deadline()
        self.busy = True
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            self.busy = False
            self.waiting_since = self._loop.time()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def _start_header_deadline(self) -> None:
        self._header_deadline = self._loop.call_later(self._header_timeout_s,
                                                      self._headers_too_slow)

    def _cancel_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.busy:
            return
        peer = self.transport.get_extra_info("peername") if self.transport else None
        log.info("closing a connection from %s: no complete request headers within %gs "
                 "(TOREN_HEADER_TIMEOUT)", peer, self._header_timeout_s)
        self.force_close()
