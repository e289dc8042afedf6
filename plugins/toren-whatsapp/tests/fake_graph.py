"""A fake WhatsApp Cloud (Graph) API over HTTP (aiohttp, in a thread of the test process).

``POST /v21.0/<phone_number_id>/messages`` with ``Authorization: Bearer <token>`` is
answered as Meta does: ``{"messaging_product": "whatsapp", "messages": [{"id": ...}]}``, or an
``{"error": {"message", "code"}}`` body for scripted failures (``fail``). Media people sent
(``media``) is served as the Cloud API does: ``GET /v21.0/<media id>`` gives a short-lived
``url`` (here, on this server), which answers the bytes to the same bearer token;
``fail_media(stage, status)`` scripts failures of either.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from typing import Any

from aiohttp import web

from toren.testing import ServerThread

ACCESS_TOKEN = "EAAG-test-token"
PHONE_ID = "1098765"
#: What the tests' agent is configured with, and the number it allow-lists.
APP_SECRET = "app-secret-for-tests"
VERIFY_TOKEN = "verify-me"
FRIEND = "15550001111"


class FakeGraph:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[dict[str, Any]] = []
        self.calls: list[tuple[float, int]] = []
        self.failures: list[tuple[int, int, str | None]] = []
        self.media_files: dict[str, tuple[bytes, str]] = {}  # media id -> (data, mime type)
        self.media_failures: dict[str, list[int]] = {"lookup": [], "download": []}
        self.downloads: list[str] = []  # media ids downloaded (200), in order
        self.media_calls: list[tuple[str, int]] = []  # (lookup|download, status)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: ServerThread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v21.0"

    def fail(self, status: int, code: int, retry_after: str | None = None) -> None:
        with self.lock:
            self.failures.append((status, code, retry_after))

    def media(self, data: bytes, mime_type: str) -> str:
        """Keep ``data`` as media a person sent; its media id."""
        with self.lock:
            media_id = f"{1000 + len(self.media_files)}"
            self.media_files[media_id] = (data, mime_type)
        return media_id

    def fail_media(self, stage: str, status: int, *, times: int = 1) -> None:
        """The next ``times`` answers of ``stage`` (``lookup``: GET /<media id>;
        ``download``: GET of its URL) are ``status``."""
        with self.lock:
            self.media_failures[stage].extend([status] * times)

    def texts(self, to: str | None = None) -> list[str]:
        with self.lock:
            return [body["text"]["body"] if body["type"] == "text"
                    else body["interactive"]["body"]["text"]
                    for body in self.sent if to is None or body["to"] == to]

    def start(self) -> FakeGraph:
        self._server = ServerThread(self._app, name="fake-graph").start()
        self._loop = self._server.loop
        self.port = self._server.port
        return self

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v21.0/{phone}/messages", self._messages)
        app.router.add_get("/v21.0/{phone}", self._number)
        app.router.add_get("/media-download/{media_id}", self._download)
        return app

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    async def _number(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
            return web.json_response({"error": {"message": "Invalid OAuth access token",
                                                "code": 190}}, status=401)
        with self.lock:
            media = self.media_files.get(request.match_info["phone"])
        if media is not None:
            return self._media_lookup(request.match_info["phone"], *media)
        if request.match_info["phone"] != PHONE_ID:
            return web.json_response({"error": {"message": "Unsupported get request",
                                                "code": 100}}, status=400)
        return web.json_response({"id": PHONE_ID, "display_phone_number": "15550000000",
                                  "verified_name": "Test"})

    async def _messages(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
            return self._answer(401, {"error": {"message": "Invalid OAuth access token",
                                                "code": 190}})
        if request.match_info["phone"] != PHONE_ID:
            return self._answer(400, {"error": {"message": "Unsupported post request",
                                                "code": 100}})
        body = await request.json()
        with self.lock:
            failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            status, code, retry_after = failure
            headers = {"Retry-After": retry_after} if retry_after else {}
            return self._answer(status, {"error": {"message": "failure", "code": code}},
                                headers)
        with self.lock:
            self.sent.append(body)
        return self._answer(200, {"messaging_product": "whatsapp", "contacts": [
            {"input": body["to"], "wa_id": body["to"]}],
            "messages": [{"id": f"wamid.out{len(self.sent)}"}]})

    def _media_lookup(self, media_id: str, data: bytes, mime_type: str) -> web.Response:
        with self.lock:
            failures = self.media_failures["lookup"]
            status = failures.pop(0) if failures else 200
            self.media_calls.append(("lookup", status))
        if status != 200:
            return web.json_response({"error": {"message": "failure", "code": 2}},
                                     status=status)
        return web.json_response({
            "messaging_product": "whatsapp", "id": media_id, "mime_type": mime_type,
            "sha256": hashlib.sha256(data).hexdigest(), "file_size": len(data),
            "url": f"http://127.0.0.1:{self.port}/media-download/{media_id}"})

    async def _download(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
            return web.json_response({"error": {"message": "Invalid OAuth access token",
                                                "code": 190}}, status=401)
        media_id = request.match_info["media_id"]
        with self.lock:
            failures = self.media_failures["download"]
            status = failures.pop(0) if failures else 200
            media = self.media_files.get(media_id)
            if media is None:
                status = 404
            self.media_calls.append(("download", status))
            if status == 200:
                self.downloads.append(media_id)
        if status != 200 or media is None:
            return web.Response(status=status, text="failure")
        return web.Response(body=media[0], content_type=media[1])

    def _answer(self, status: int, body: dict[str, Any],
                headers: dict[str, str] | None = None) -> web.Response:
        with self.lock:
            self.calls.append((time.monotonic(), status))
        return web.json_response(body, status=status, headers=headers)
