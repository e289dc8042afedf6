"""A fake Slack over HTTP and WebSocket (aiohttp, in a thread of the test process).

The Web API as the channel uses it: ``POST /api/<method>`` with ``Authorization: Bearer
<token>`` and a JSON (or form) body, answered ``{"ok": true, ...}`` or ``{"ok": false,
"error": ...}``: ``auth.test``, ``chat.postMessage`` (accepted bodies kept in ``posts``; the
next answers for a channel scripted with ``fail``), ``chat.postEphemeral`` (kept in
``ephemerals``) and ``apps.connections.open``, whose URL is this server's Socket Mode
WebSocket (``/link/``). It says ``hello``, pushes the envelopes of ``push``, and keeps each
in flight until its ``{"envelope_id"}`` acknowledgement comes back; an envelope in flight on
a connection that closes is sent again (a new envelope id, ``retry_attempt`` + 1) on the
next, as Slack does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import WSMsgType, web

from toren.testing import ServerThread

BOT_TOKEN = "xoxb-test-bot-token"
APP_TOKEN = "xapp-test-app-token"
BOT_USER = "UBOT0001"
BOT_ID = "BBOT0001"
TEAM = "T0TEAM01"


class FakeSlack:
    """Start with ``start()``; ``url`` is the Web API's base URL; ``stop()`` at the end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.posts: list[dict[str, Any]] = []
        self.ephemerals: list[dict[str, Any]] = []
        #: (time, method, HTTP status answered)
        self.calls: list[tuple[float, str, int]] = []
        #: channel -> scripted answers of chat.postMessage: (status, error, Retry-After)
        self.failures: dict[str, list[tuple[int, str, str | None]]] = {}
        # Socket Mode
        self.queued: list[dict[str, Any]] = []
        self.in_flight: dict[str, tuple[int, dict[str, Any]]] = {}
        self.acked: list[dict[str, Any]] = []
        self.stray_acks: list[str] = []
        self.connections_opened = 0
        self.live: set[int] = set()
        self.most_live = 0
        #: Called (in the fake's thread) with each envelope as its acknowledgement arrives.
        self.on_ack: Callable[[dict[str, Any]], None] | None = None
        #: While true, acknowledgements are read and dropped (lost on the way).
        self.drop_acks = False
        self._disconnect: set[int] = set()
        self._drop: set[int] = set()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: ServerThread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # -- scripting ---------------------------------------------------------------------------

    def fail(self, channel: str, status: int, error: str = "", *,
             retry_after: str | None = None, times: int = 1) -> None:
        """The next ``times`` chat.postMessage calls to ``channel`` answer ``status`` (with
        ``ok: false, error`` when ``error`` is given)."""
        with self.lock:
            self.failures.setdefault(channel, []).extend([(status, error, retry_after)] * times)

    def texts(self, channel: str | None = None, thread_ts: str | None = None) -> list[str]:
        """The texts posted (to ``channel``, in thread ``thread_ts`` if given)."""
        with self.lock:
            return [body["text"] for body in self.posts
                    if (channel is None or body["channel"] == channel)
                    and (thread_ts is None or body.get("thread_ts") == thread_ts)]

    def push(self, payload: dict[str, Any], kind: str = "events_api") -> str:
        """Queue an envelope carrying ``payload`` for the Socket Mode connection; its id."""
        envelope = {"envelope_id": str(uuid.uuid4()), "type": kind, "payload": payload,
                    "accepts_response_payload": False, "retry_attempt": 0, "retry_reason": ""}
        with self.lock:
            self.queued.append(envelope)
        return str(envelope["envelope_id"])

    def disconnect(self) -> None:
        """Send every live connection Slack's ``disconnect`` (``refresh_requested``)."""
        with self.lock:
            self._disconnect |= self.live

    def drop(self) -> None:
        """Close every live connection from this end, with no word first (a network
        failure, a Slack restart)."""
        with self.lock:
            self._drop |= self.live

    def settled(self) -> bool:
        """Whether every pushed envelope was acknowledged."""
        with self.lock:
            return not self.queued and not self.in_flight

    # -- server ------------------------------------------------------------------------------

    def start(self) -> FakeSlack:
        self._server = ServerThread(self._app, name="fake-slack").start()
        self._loop = self._server.loop
        self.port = self._server.port
        return self

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/link/", self._link)
        return app

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        raw = await request.text()
        if request.content_type == "application/json" and raw:
            body = json.loads(raw)
        else:
            body = dict(parse_qsl(raw))
        if method == "apps.connections.open":
            if token != APP_TOKEN:
                return self._answer(method, 200, {"ok": False, "error": "invalid_auth"})
            return self._answer(method, 200, {
                "ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={uuid.uuid4()}"})
        if token != BOT_TOKEN:
            return self._answer(method, 200, {"ok": False, "error": "invalid_auth"})
        if method == "auth.test":
            return self._answer(method, 200, {
                "ok": True, "url": "https://test.slack.com/", "team": "Test", "user": "toren",
                "team_id": TEAM, "user_id": BOT_USER, "bot_id": BOT_ID})
        if method == "chat.postMessage":
            with self.lock:
                scripted = self.failures.get(str(body.get("channel")))
                failure = scripted.pop(0) if scripted else None
            if failure is not None:
                status, error, retry_after = failure
                headers = {"Retry-After": retry_after} if retry_after else {}
                if not error:
                    return self._answer(method, status, None, headers)
                return self._answer(method, status, {"ok": False, "error": error}, headers)
            with self.lock:
                self.posts.append(body)
                ts = f"{int(time.time())}.{len(self.posts):06d}"
            return self._answer(method, 200, {"ok": True, "channel": body.get("channel"),
                                              "ts": ts, "message": {"text": body.get("text")}})
        if method == "chat.postEphemeral":
            with self.lock:
                self.ephemerals.append(body)
            return self._answer(method, 200, {"ok": True, "message_ts": "1700000000.000001"})
        return self._answer(method, 404, {"ok": False, "error": "unknown_method"})

    def _answer(self, method: str, status: int, body: dict[str, Any] | None,
                headers: dict[str, str] | None = None) -> web.Response:
        with self.lock:
            self.calls.append((time.monotonic(), method, status))
        if body is None:  # what a proxy in front of Slack answers on a 5xx
            return web.Response(status=status, text="upstream failure", headers=headers)
        return web.json_response(body, status=status, headers=headers)

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        connection = next(self._ids)
        with self.lock:
            self.connections_opened += 1
            self.live.add(connection)
            self.most_live = max(self.most_live, len(self.live))
        await socket.send_json({"type": "hello", "num_connections": len(self.live),
                                "connection_info": {"app_id": "A0APP001"}})
        reader = asyncio.ensure_future(self._read_acks(socket))
        try:
            while not socket.closed and not reader.done():
                with self.lock:
                    sending, self.queued = self.queued, []
                    for envelope in sending:
                        self.in_flight[envelope["envelope_id"]] = (connection, envelope)
                    disconnect = connection in self._disconnect
                    self._disconnect.discard(connection)
                    drop = connection in self._drop
                    self._drop.discard(connection)
                if drop:
                    await socket.close()
                    break
                for envelope in sending:
                    await socket.send_json(envelope)
                if disconnect:
                    await socket.send_json({"type": "disconnect", "reason": "refresh_requested"})
                await asyncio.sleep(0.02)
        finally:
            reader.cancel()
            with self.lock:
                self.live.discard(connection)
                again = []
                for key, (holder, envelope) in list(self.in_flight.items()):
                    if holder == connection:
                        del self.in_flight[key]
                        again.append(envelope)
                self.queued[:0] = [envelope | {
                    "envelope_id": str(uuid.uuid4()),
                    "retry_attempt": envelope["retry_attempt"] + 1,
                    "retry_reason": "timeout"} for envelope in again]
        return socket

    async def _read_acks(self, socket: web.WebSocketResponse) -> None:
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                continue
            envelope_id = json.loads(message.data).get("envelope_id")
            if self.drop_acks:
                continue
            with self.lock:
                found = self.in_flight.pop(envelope_id, None)
            if found is None:
                with self.lock:
                    self.stray_acks.append(str(envelope_id))
                continue
            if self.on_ack is not None:
                self.on_ack(found[1])
            with self.lock:
                self.acked.append(found[1])
