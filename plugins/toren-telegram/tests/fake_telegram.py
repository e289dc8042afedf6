"""A fake Telegram Bot API over HTTP (aiohttp, in a thread of the test process).

It speaks the wire format the channel uses: ``POST /bot<token>/<method>`` with a JSON body,
answered ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code", "description",
"parameters": {"retry_after"}}``. ``getUpdates`` long-polls and forgets updates below the
``offset`` it is given (as Telegram confirms them); two getUpdates at once get 409, as on
Telegram. ``fail(method, status, retry_after=...)`` scripts the next answers of a method.
Files people sent (``photo``, ``document``) are served as Telegram does: ``getFile`` gives a
``file_path``, ``GET /file/bot<token>/<file_path>`` the bytes (``fail("download", 500)``
scripts that answer too); a file over 20 MB is refused by ``getFile`` ("file is too big").
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from aiohttp import web

from toren.testing import ServerThread

TOKEN = "123456:TEST-token"
#: The largest file the Bot API lets a bot download.
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024


class FakeTelegram:
    """Start with ``start()``; ``url`` is the API base URL; ``stop()`` at the end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.updates: list[dict[str, Any]] = []
        self.confirmed = 0  # the highest offset a getUpdates has sent
        self.sent: list[dict[str, Any]] = []  # sendMessage bodies accepted, in order
        self.calls: list[tuple[float, str, int]] = []  # (time, method, status answered)
        self.failures: dict[str, list[tuple[int, float | None]]] = {}
        self.actions: list[dict[str, Any]] = []
        self.answered: list[dict[str, Any]] = []
        self.conflicts = 0
        self.files: dict[str, tuple[str, bytes, int]] = {}  # file_id -> (path, data, size)
        self.downloads: list[str] = []  # file paths downloaded (200), in order
        self._polling = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: ServerThread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- scripting ---------------------------------------------------------------------------

    def add_update(self, update: dict[str, Any]) -> None:
        with self.lock:
            self.updates.append(update)

    def message(self, update_id: int, user_id: int, text: str, *, chat_type: str = "private"
                ) -> dict[str, Any]:
        """Queue a text message from ``user_id`` in their private chat; return it."""
        update = {"update_id": update_id, "message": {
            "message_id": update_id, "date": int(time.time()), "text": text,
            "chat": {"id": user_id, "type": chat_type},
            "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}}}
        self.add_update(update)
        return update

    def add_file(self, data: bytes, *, size: int | None = None, folder: str = "photos") -> str:
        """Keep ``data`` as a file a person sent (``size``: the size Telegram says it has,
        its length by default); its file_id."""
        with self.lock:
            file_id = f"AgAC{len(self.files):04d}"
            self.files[file_id] = (f"{folder}/file_{len(self.files)}.bin", data,
                                   len(data) if size is None else size)
        return file_id

    def photo(self, update_id: int, user_id: int, data: bytes, *, caption: str | None = None,
              size: int | None = None, thumbnail: bytes | None = None) -> dict[str, Any]:
        """Queue a photo (``data`` its largest size; ``thumbnail`` a smaller one, listed
        first, as Telegram lists sizes), with ``caption``; return the update."""
        sizes = []
        if thumbnail is not None:
            sizes.append({"file_id": self.add_file(thumbnail), "file_unique_id": "t",
                          "width": 90, "height": 60, "file_size": len(thumbnail)})
        file_id = self.add_file(data, size=size)
        sizes.append({"file_id": file_id, "file_unique_id": "p", "width": 1280, "height": 853,
                      "file_size": self.files[file_id][2]})
        return self._media(update_id, user_id, {"photo": sizes}, caption)

    def document(self, update_id: int, user_id: int, data: bytes, *, file_name: str,
                 mime_type: str, caption: str | None = None, size: int | None = None,
                 declare_size: bool = True) -> dict[str, Any]:
        """Queue a document (a file sent as a file, not as a photo); return the update.
        ``declare_size=False`` leaves ``file_size`` out (it is optional in the Bot API)."""
        file_id = self.add_file(data, size=size, folder="documents")
        document: dict[str, Any] = {"file_id": file_id, "file_unique_id": "d",
                                    "file_name": file_name, "mime_type": mime_type}
        if declare_size:
            document["file_size"] = self.files[file_id][2]
        return self._media(update_id, user_id, {"document": document}, caption)

    def _media(self, update_id: int, user_id: int, media: dict[str, Any],
               caption: str | None) -> dict[str, Any]:
        message = {"message_id": update_id, "date": int(time.time()),
                   "chat": {"id": user_id, "type": "private"},
                   "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}}
        message |= media | ({"caption": caption} if caption is not None else {})
        update = {"update_id": update_id, "message": message}
        self.add_update(update)
        return update

    def press(self, update_id: int, user_id: int, data: str) -> None:
        """Queue a press of an inline button carrying ``data``."""
        self.add_update({"update_id": update_id, "callback_query": {
            "id": f"cb{update_id}", "data": data, "from": {"id": user_id},
            "message": {"message_id": 1, "chat": {"id": user_id, "type": "private"}}}})

    def fail(self, method: str, status: int, *, retry_after: float | None = None,
             times: int = 1) -> None:
        with self.lock:
            self.failures.setdefault(method, []).extend([(status, retry_after)] * times)

    def texts(self, chat_id: int | None = None) -> list[str]:
        with self.lock:
            return [body["text"] for body in self.sent
                    if chat_id is None or str(body["chat_id"]) == str(chat_id)]

    # -- server ------------------------------------------------------------------------------

    def start(self) -> FakeTelegram:
        self._server = ServerThread(self._app, name="fake-telegram").start()
        self._loop = self._server.loop
        self.port = self._server.port
        return self

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        return app

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.match_info["token"] != TOKEN:
            return self._answer(method, 401, {"ok": False, "error_code": 401,
                                              "description": "Unauthorized"})
        body = await request.json()
        with self.lock:
            scripted = self.failures.get(method)
            failure = scripted.pop(0) if scripted else None
        if failure is not None:
            status, retry_after = failure
            answer: dict[str, Any] = {"ok": False, "error_code": status,
                                      "description": "Too Many Requests" if status == 429
                                      else "Internal Server Error"}
            if retry_after is not None:
                answer["parameters"] = {"retry_after": retry_after}
            return self._answer(method, status, answer)
        if method == "getUpdates":
            return await self._get_updates(body)
        if method == "sendMessage":
            with self.lock:
                self.sent.append(body)
            return self._answer(method, 200, {"ok": True, "result": {
                "message_id": len(self.sent), "chat": {"id": body["chat_id"]},
                "text": body["text"]}})
        if method == "sendChatAction":
            with self.lock:
                self.actions.append(body)
            return self._answer(method, 200, {"ok": True, "result": True})
        if method == "answerCallbackQuery":
            with self.lock:
                self.answered.append(body)
            return self._answer(method, 200, {"ok": True, "result": True})
        if method == "getFile":
            return self._get_file(body)
        if method == "getMe":
            return self._answer(method, 200, {"ok": True, "result": {
                "id": 123456, "is_bot": True, "first_name": "Test", "username": "test_bot"}})
        if method == "setWebhook":
            return self._answer(method, 200, {"ok": True, "result": True})
        return self._answer(method, 404, {"ok": False, "error_code": 404,
                                          "description": "Not Found"})

    async def _get_updates(self, body: dict[str, Any]) -> web.Response:
        if self._polling:
            self.conflicts += 1
            return self._answer("getUpdates", 409, {
                "ok": False, "error_code": 409, "description":
                "Conflict: terminated by other getUpdates request"})
        self._polling += 1
        try:
            offset = body.get("offset")
            deadline = time.monotonic() + min(float(body.get("timeout", 0)), 2.0)
            while True:
                with self.lock:
                    if offset is not None:
                        self.confirmed = max(self.confirmed, offset)
                        self.updates = [u for u in self.updates if u["update_id"] >= offset]
                    pending = list(self.updates)
                if pending or time.monotonic() >= deadline:
                    return self._answer("getUpdates", 200, {"ok": True, "result": pending})
                await asyncio.sleep(0.05)
        finally:
            self._polling -= 1

    def _get_file(self, body: dict[str, Any]) -> web.Response:
        with self.lock:
            found = self.files.get(str(body.get("file_id")))
        if found is None:
            return self._answer("getFile", 400, {"ok": False, "error_code": 400,
                                                 "description": "Bad Request: invalid file_id"})
        path, _data, size = found
        if size > MAX_DOWNLOAD_BYTES:
            return self._answer("getFile", 400, {"ok": False, "error_code": 400,
                                                 "description": "Bad Request: file is too big"})
        return self._answer("getFile", 200, {"ok": True, "result": {
            "file_id": body["file_id"], "file_unique_id": "u", "file_size": size,
            "file_path": path}})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != TOKEN:
            return self._answer("download", 404, {"ok": False, "error_code": 404,
                                                  "description": "Not Found"})
        path = request.match_info["path"]
        with self.lock:
            scripted = self.failures.get("download")
            failure = scripted.pop(0) if scripted else None
            found = next((data for file_path, data, _size in self.files.values()
                          if file_path == path), None)
        if failure is not None:
            return self._answer("download", failure[0], {"ok": False, "error_code": failure[0],
                                                         "description": "Internal Server Error"})
        if found is None:
            return self._answer("download", 404, {"ok": False, "error_code": 404,
                                                  "description": "Not Found"})
        with self.lock:
            self.downloads.append(path)
            self.calls.append((time.monotonic(), "download", 200))
        return web.Response(body=found, content_type="application/octet-stream")

    def _answer(self, method: str, status: int, body: dict[str, Any]) -> web.Response:
        with self.lock:
            self.calls.append((time.monotonic(), method, status))
        return web.json_response(body, status=status)
