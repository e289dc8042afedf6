"""A local fake of the Tavily search API (``POST /search``) for tests, in-process or as a script.

It checks the bearer key, counts requests, and answers each request with the next step of a
script: ``"ok"`` (results), ``401``, ``429``, ``500`` or ``"hang"`` (no answer for a minute).
After the script it answers ``"ok"``. ``GET /_fake/stats`` returns the counts. Run as a script
(``python fake_tavily.py --script 429,ok``) it prints ``{"port": N}`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

TEST_KEY = "tvly-test-key"


def results_for(query: str) -> list[dict[str, Any]]:
    return [{"title": f"{query} - result {n}", "url": f"https://example.com/{n}",
             "content": f"What page {n} says about {query}.", "score": round(1 - n / 10, 2),
             "raw_content": None} for n in range(1, 4)]


class FakeTavily:
    """The server; ``requests`` holds each request body, ``url`` its address once started."""

    def __init__(self, script: Sequence[str | int] = (), *, api_key: str = TEST_KEY) -> None:
        self.script = list(script)
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def search(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"detail": {"error": "Unauthorized: missing or invalid "
                                                          "API key."}}, status=401)
        step = self.script.pop(0) if self.script else "ok"
        if step == "hang":
            await asyncio.sleep(60)
        if isinstance(step, int) or str(step).isdigit():
            status = int(step)
            return web.json_response({"detail": {"error": f"fake error {status}"}}, status=status)
        results = results_for(body["query"])[: body.get("max_results", 5)]
        return web.json_response({"query": body["query"], "answer": None, "images": [],
                                  "results": results, "response_time": 0.01})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"/search": len(self.requests)})

    async def start(self, port: int = 0) -> FakeTavily:
        app = web.Application()
        app.router.add_post("/search", self.search)
        app.router.add_get("/_fake/stats", self.stats)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{bound}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def _main(script: Sequence[str | int]) -> None:
    fake = await FakeTavily(script).start()
    print(json.dumps({"port": int(fake.url.rsplit(":", 1)[1])}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--script", default="", help="comma-separated steps, e.g. 429,ok")
    steps = [s for s in parser.parse_args().script.split(",") if s]
    try:
        asyncio.run(_main(steps))
    except KeyboardInterrupt:
        sys.exit(0)


#: The ``fake_tavily`` fixture: ``await fake_tavily(["429", "ok"])`` -> a started ``FakeTavily``.
FakeFactory = Callable[..., Awaitable[FakeTavily]]
