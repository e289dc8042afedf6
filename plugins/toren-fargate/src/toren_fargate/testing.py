"""Test helpers: a fake ECS agent speaking the task protection API, on its own thread (so a
test may block while a worker subprocess calls it), for toren-fargate's tests and Toren's.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/toren/0123456789abcdef"


@dataclass
class FakeEcsAgent:
    """``PUT /task-protection/v1/state`` and ``GET`` of the same path, as the ECS agent
    answers them (``{"protection": {...}}``); every accepted PUT body is in ``requests``.

    ``fail_with`` makes the next PUTs answer that HTTP status; ``refuse`` makes them answer
    200 with ``{"failure": ...}`` (ECS refused), as the agent does.
    """

    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_with: int | None = None
    refuse: bool = False
    enabled: bool = False
    url: str = ""
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    def start(self) -> FakeEcsAgent:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_route("PUT", "/task-protection/v1/state", self._put)
            app.router.add_route("GET", "/task-protection/v1/state", self._get)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", port)
            self._loop.run_until_complete(site.start())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=serve, daemon=True, name="fake-ecs-agent")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake ECS agent did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def states(self) -> list[bool]:
        """``ProtectionEnabled`` of every accepted PUT, in order."""
        return [bool(body.get("ProtectionEnabled")) for body in list(self.requests)]

    def wait_for(self, states: list[bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.states()[:len(states)] == states:
                return True
            time.sleep(0.05)
        return False

    def _answer(self) -> dict[str, Any]:
        return {"protection": {"ExpirationDate": None if not self.enabled else
                               "2030-01-01T00:00:00Z", "ProtectionEnabled": self.enabled,
                               "TaskArn": TASK_ARN}}

    async def _put(self, request: web.Request) -> web.Response:
        if self.fail_with is not None:
            return web.json_response({"error": {"Code": "ServerException"}},
                                     status=self.fail_with)
        try:
            body = json.loads(await request.text())
        except ValueError:
            return web.json_response({"error": {"Code": "InvalidParameterException",
                                                "Message": "bad JSON"}}, status=400)
        if not isinstance(body, dict) or not isinstance(body.get("ProtectionEnabled"), bool):
            return web.json_response({"error": {"Code": "InvalidParameterException",
                                                "Message": "ProtectionEnabled is required"}},
                                     status=400)
        if self.refuse:
            return web.json_response({"failure": {"Arn": TASK_ARN,
                                                  "Reason": "TASK_NOT_VALID"}})
        self.requests.append(body)
        self.enabled = body["ProtectionEnabled"]
        return web.json_response(self._answer())

    async def _get(self, request: web.Request) -> web.Response:
        return web.json_response(self._answer())
