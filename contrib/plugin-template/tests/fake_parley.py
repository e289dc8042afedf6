"""Parley, a small chat platform, as a local HTTP server: what the parley channel's tests talk
to, and what you can run by hand to chat with your agent (``python tests/fake_parley.py``).

The bot's side; every call carries ``Authorization: Bearer <token>`` (else 401):

- ``GET /me`` -> ``{"id", "name"}``
- ``GET /updates?offset=N&timeout=S`` -> ``{"updates": [...]}``: waits up to ``S`` seconds for
  updates whose ``id`` is at least ``N``, and forgets the ones below ``N`` (the bot has them).
  An update is ``{"id", "chat", "user": {"id", "name"}, "text"}``, or ``"press"`` (the data of
  a button the person pressed) instead of ``"text"``.
- ``POST /messages`` ``{"chat", "text", "buttons"?}`` -> ``{"id"}``; ``buttons`` are rows of
  ``{"text", "data"}``; a text over 2,000 characters is refused (400).
- ``POST /typing`` ``{"chat"}`` -> ``{}``

Errors are ``{"error": message}`` with their status; a 429 carries ``Retry-After`` (seconds).

The people's side (no token; a person's chat with the bot is named by the person's id):

- ``POST /users/{user}/messages`` ``{"text"}``: a message to the bot
- ``POST /users/{user}/presses`` ``{"data"}``: a press of a button the bot sent
- ``GET /users/{user}/messages`` -> ``{"messages": [{"text", "buttons"}]}``: what the bot sent
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
import urllib.request
from typing import Any

from aiohttp import web

from toren.testing import ServerThread

TOKEN = "parley-test-token"
MAX_TEXT = 2000


class FakeParley:
    """``start()`` serves it in a thread; ``url`` is its base URL; ``stop()`` at the end.

    ``say``, ``press`` and ``messages`` are the people's side, over HTTP (so an instance that
    is not started talks to a Parley already serving on ``port``). ``fail(path, status)``
    scripts the next answers to the bot's calls of ``path``; ``calls`` records every bot call
    as ``(monotonic time, "METHOD /path", status)``.
    """

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.lock = threading.Lock()  # the state below is read by tests in other threads
        self.updates: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.calls: list[tuple[float, str, int]] = []
        self.failures: dict[str, list[tuple[int, int | None]]] = {}
        self._next_id = 1
        self._arrived: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: ServerThread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what tests use --------------------------------------------------------------------

    def say(self, user: str, text: str) -> None:
        """``user`` sends the bot ``text`` (through the people's HTTP side)."""
        self._post(f"/users/{user}/messages", {"text": text})

    def press(self, user: str, data: str) -> None:
        """``user`` presses a button carrying ``data``."""
        self._post(f"/users/{user}/presses", {"data": data})

    def messages(self, user: str) -> list[dict[str, Any]]:
        """What the bot sent to ``user``'s chat, in order."""
        with urllib.request.urlopen(f"{self.url}/users/{user}/messages", timeout=10) as answer:
            return list(json.load(answer)["messages"])

    def texts(self, user: str) -> list[str]:
        return [message["text"] for message in self.messages(user)]

    def fail(self, path: str, status: int, *, retry_after: int | None = None) -> None:
        with self.lock:
            self.failures.setdefault(path, []).append((status, retry_after))

    def statuses(self, call: str) -> list[int]:
        """The statuses answered to ``call`` (``"POST /messages"``), in order."""
        with self.lock:
            return [status for _at, name, status in self.calls if name == call]

    def _post(self, path: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).close()

    # -- the server --------------------------------------------------------------------------

    def start(self) -> FakeParley:
        self._server = ServerThread(self._app, port=self.port, name="fake-parley").start()
        self._loop = self._server.loop
        self.port = self._server.port
        return self

    def _app(self) -> web.Application:
        self._arrived = asyncio.Condition()
        app = web.Application()
        app.router.add_get("/me", self._me)
        app.router.add_get("/updates", self._get_updates)
        app.router.add_post("/messages", self._post_message)
        app.router.add_post("/typing", self._typing)
        app.router.add_post("/users/{user}/messages", self._user_says)
        app.router.add_post("/users/{user}/presses", self._user_presses)
        app.router.add_get("/users/{user}/messages", self._user_reads)
        return app

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def _refusal(self, request: web.Request) -> web.Response | None:
        """The answer to a bot call that fails: a wrong token, or a scripted failure."""
        call = f"{request.method} {request.path}"
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._answer(call, 401, {"error": "unknown bot token"})
        with self.lock:
            scripted = self.failures.get(request.path)
            failure = scripted.pop(0) if scripted else None
        if failure is None:
            return None
        status, retry_after = failure
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return self._answer(call, status, {"error": "slow down" if status == 429
                                           else "something broke"}, headers)

    def _answer(self, call: str, status: int, body: dict[str, Any],
                headers: dict[str, str] | None = None) -> web.Response:
        with self.lock:
            self.calls.append((time.monotonic(), call, status))
        return web.json_response(body, status=status, headers=headers)

    async def _me(self, request: web.Request) -> web.Response:
        return self._refusal(request) or self._answer("GET /me", 200, {"id": "bot",
                                                                       "name": "Test bot"})

    async def _get_updates(self, request: web.Request) -> web.Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        offset = int(request.query.get("offset", "0"))
        timeout = min(float(request.query.get("timeout", "0")), 5.0)
        assert self._arrived is not None
        async with self._arrived:
            with self.lock:
                self.updates = [update for update in self.updates if update["id"] >= offset]
            try:
                async with asyncio.timeout(timeout):
                    await self._arrived.wait_for(lambda: bool(self.updates))
            except TimeoutError:
                pass
            with self.lock:
                pending = list(self.updates)
        return self._answer("GET /updates", 200, {"updates": pending})

    async def _post_message(self, request: web.Request) -> web.Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        body = await request.json()
        if not isinstance(body.get("text"), str) or len(body["text"]) > MAX_TEXT:
            return self._answer("POST /messages", 400,
                                {"error": f"text must be a string of at most {MAX_TEXT}"})
        with self.lock:
            self.sent.append(body)
            number = len(self.sent)
        return self._answer("POST /messages", 200, {"id": number})

    async def _typing(self, request: web.Request) -> web.Response:
        return self._refusal(request) or self._answer("POST /typing", 200, {})

    async def _user_says(self, request: web.Request) -> web.Response:
        return await self._add_update(request, "text", (await request.json())["text"])

    async def _user_presses(self, request: web.Request) -> web.Response:
        return await self._add_update(request, "press", (await request.json())["data"])

    async def _add_update(self, request: web.Request, key: str, value: str) -> web.Response:
        user = request.match_info["user"]
        assert self._arrived is not None
        async with self._arrived:
            with self.lock:
                update = {"id": self._next_id, "chat": user,
                          "user": {"id": user, "name": user.title()}, key: value}
                self._next_id += 1
                self.updates.append(update)
            self._arrived.notify_all()
        return web.json_response({"id": update["id"]})

    async def _user_reads(self, request: web.Request) -> web.Response:
        user = request.match_info["user"]
        with self.lock:
            mine = [{"text": body["text"], "buttons": body.get("buttons", [])}
                    for body in self.sent if body.get("chat") == user]
        return web.json_response({"messages": mine})


def main() -> None:
    """Serve until interrupted: ``python tests/fake_parley.py [PORT]`` (default 8765)."""
    signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # the server's thread inherits the mask
    fake = FakeParley(int(sys.argv[1]) if len(sys.argv) > 1 else 8765).start()
    print(json.dumps({"url": fake.url, "token": TOKEN}), flush=True)
    signal.sigwait(signals)
    fake.stop()


if __name__ == "__main__":
    main()
