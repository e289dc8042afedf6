"""``/mcp`` on the HTTP API: the MCP streamable HTTP transport inside the aiohttp app.

The SDK's transport is an ASGI application; ``McpEndpoint.handle`` hands it each request
(after the API-key and browser-guard middlewares accepted it) and streams its answer back.
The tools then call the HTTP API on this same server with the caller's own key, so ``/mcp``
allows exactly what the key allows on the other routes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from toren.plugin import AUTHENTICATED, TorenClient, route_scope
from toren_mcp.server import MCP_HEADERS, build_server

#: Set by ``McpEndpoint`` on every request it forwards (any such header a caller sent is
#: dropped): the URL of this server's own HTTP API, for the tools' client.
SELF_URL_HEADER = "x-toren-mcp-self-url"


@asynccontextmanager
async def _forwarding_client(ctx: Context) -> AsyncIterator[TorenClient]:
    headers = ctx.headers or {}
    authorization = headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    key = token.strip() if scheme.lower() == "bearer" else ""
    async with TorenClient(headers[SELF_URL_HEADER], key or "", headers=MCP_HEADERS) as client:
        yield client


class McpEndpoint:
    """Serves MCP at ``POST /mcp``. The plugin's ``register_routes`` (called once by
    ``create_app``) calls ``install``; the session manager runs from the app's start-up to its
    clean-up."""

    def __init__(self) -> None:
        server = build_server(_forwarding_client)
        # stateless: any server process can answer any request, nothing to lose on restart
        # (runs are durable; a client reconnecting just calls the tools again). The SDK's own
        # Host/Origin checks stay off (a non-loopback ``host``): the browser guard middleware
        # already applies Toren's rules to /mcp as to every route.
        server.streamable_http_app(stateless_http=True, host="0.0.0.0")
        self.manager: StreamableHTTPSessionManager = server.session_manager

    def install(self, app: web.Application) -> None:
        """Add the routes and the session manager's lifetime to ``app``."""
        app.cleanup_ctx.append(self._lifetime)
        # stateless: no server-to-client stream (GET) and no session to end (DELETE); the
        # SDK's client takes the 405 for either as the specification allows
        # any valid key: each tool calls the API with the caller's key, so each tool needs
        # the scope its route needs (a tool error names it)
        app.router.add_post("/mcp", route_scope(AUTHENTICATED)(self.handle))

    async def _lifetime(self, app: web.Application) -> AsyncIterator[None]:
        # The manager's anyio task group must be entered and left by one task, and an app's
        # start-up and clean-up may run in different tasks (pytest fixtures, embedding hosts):
        # a task of its own holds it from start-up until clean-up says stop.
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        holder = asyncio.create_task(hold(), name="toren-mcp-sessions")
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({holder, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():  # the manager failed to start: say why, at start-up
            waiting.cancel()
            await holder
        try:
            yield
        finally:
            stop.set()
            await holder

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Hand ``request`` to the SDK's ASGI transport and stream back what it sends.

        What the transport would refuse in a shape of its own (plain text) is refused here
        first, as every other route refuses: the API's error middleware answers the HTTP error
        raised as JSON (``{"error": {"code", "message"}}``) naming what to send."""
        if request.content_type != "application/json":
            raise web.HTTPUnsupportedMediaType(
                text="POST /mcp takes one JSON-RPC message: send it with "
                     "Content-Type: application/json")
        accepted = {part.split(";")[0].strip().lower()
                    for part in request.headers.get("Accept", "").split(",")}
        if not {"application/json", "text/event-stream"} <= accepted:
            raise web.HTTPNotAcceptable(
                text="an MCP client must accept both application/json and "
                     "text/event-stream (Accept: application/json, text/event-stream)")
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        host, port = (sockname[0], sockname[1]) if sockname else ("127.0.0.1", 80)
        host = f"[{host}]" if ":" in host else host
        self_url = f"{'https' if request.secure else 'http'}://{host}:{port}"
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1"))
                   for name, value in request.headers.items()
                   if name.lower() != SELF_URL_HEADER]
        headers.append((SELF_URL_HEADER.encode(), self_url.encode()))
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": request.method, "scheme": request.scheme, "path": request.path,
            "raw_path": request.raw_path.encode(), "root_path": "",
            "query_string": request.query_string.encode(), "headers": headers,
            "client": request.remote and (request.remote, 0), "server": (host, port)}
        body = await request.read()
        response: web.StreamResponse | None = None
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            # the body was read whole: what is left is the disconnect, on which aiohttp
            # cancels this handler (and so this wait)
            await asyncio.get_running_loop().create_future()
            return {"type": "http.disconnect"}

        gone = False

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal response, gone
            if gone:  # the client went away: what the transport still sends goes nowhere
                return
            try:
                await forward(message)
            except ConnectionResetError:  # a client that closed mid-answer (a dropped stream)
                gone = True

        async def forward(message: MutableMapping[str, Any]) -> None:
            nonlocal response
            if message["type"] == "http.response.start":
                response = web.StreamResponse(status=message["status"])
                for name, value in message.get("headers", []):
                    response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
                response.headers.pop("Content-Length", None)
                await response.prepare(request)
            elif message["type"] == "http.response.body" and response is not None:
                chunk = message.get("body", b"")
                if chunk:
                    await response.write(chunk)
                if not message.get("more_body", False):
                    await response.write_eof()

        await self.manager.handle_request(scope, receive, send)
        if response is None:
            return web.Response(status=500)
        return response
