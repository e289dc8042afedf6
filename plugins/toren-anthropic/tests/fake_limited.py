"""The fake Messages API (``fake_anthropic``) behind an account's rate limits, as the API enforces
them: requests and input tokens per window, a 429 ``rate_limit_error`` with ``retry-after`` (the
seconds until the window has room) for a request past either, counted and not billed.

Input tokens are billed at 4 characters a token of the request's text (system prompt, text
blocks, tool results); answers follow ``tool_loop`` (``--tool-steps`` calls of ``step``, then a
final answer). For tests and ``bench/rate_limits.py``; as a process:
``python fake_limited.py --requests 60 --input-tokens 20000 --window 60 [--hang-first]``
prints ``{"port": N}``; ``GET /_fake/limits`` returns what it admitted (arrival times, tokens)
and how many it refused.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).parent))

from fake_anthropic import (
    Body,
    FakeAnthropic,
    Reply,
    rate_limited,
    serve_until_stopped,
    tool_loop,
)


def billed_input_tokens(body: Body) -> int:
    """The request's input tokens as this fake bills them: 4 characters a token of its text."""
    system = body.get("system") or ""
    chars = len(system) if isinstance(system, str) else sum(
        len(block.get("text", "")) for block in system)
    for turn in body.get("messages", []):
        content = turn["content"]
        if isinstance(content, str):
            chars += len(content)
            continue
        for block in content:
            if block.get("type") == "text":
                chars += len(block["text"])
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                chars += len(inner) if isinstance(inner, str) else sum(
                    len(part.get("text", "")) for part in inner or [])
    return chars // 4


class LimitedFake(FakeAnthropic):
    """``FakeAnthropic`` with per-window limits on requests and input tokens (``None``: none)."""

    def __init__(self, *, requests: int | None, input_tokens: int | None, window_s: float,
                 hang_first: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit_requests = requests
        self.limit_input = input_tokens
        self.window_s = window_s
        #: Admitted requests of the current window: (monotonic arrival, input tokens).
        self.window: deque[tuple[float, int]] = deque()
        #: Every admitted request: (seconds since the first request, input tokens).
        self.admitted: list[tuple[float, int]] = []
        self.refused = 0
        #: Seconds since the first request of each refusal.
        self.refusals: list[float] = []
        self.first: float | None = None
        #: Hold the first request until the process is killed (a call in flight).
        self.hang_first = hang_first

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_get("/_fake/limits", self.limits)
        return app

    def _room(self, now: float, tokens: int) -> float:
        """0 if a request of ``tokens`` fits now, else the seconds until it would."""
        while self.window and self.window[0][0] <= now - self.window_s:
            self.window.popleft()
        used_requests = len(self.window)
        used_tokens = sum(t for _, t in self.window)
        if ((self.limit_requests is None or used_requests + 1 <= self.limit_requests)
                and (self.limit_input is None or used_tokens + tokens <= self.limit_input)):
            return 0.0
        freed_tokens = 0
        for freed_requests, (arrival, held) in enumerate(self.window, start=1):
            freed_tokens += held
            if ((self.limit_requests is None
                 or used_requests - freed_requests + 1 <= self.limit_requests)
                    and (self.limit_input is None
                         or used_tokens - freed_tokens + tokens <= self.limit_input)):
                return arrival + self.window_s - now
        return self.window_s

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        now = time.monotonic()
        self.first = now if self.first is None else self.first
        tokens = billed_input_tokens(body)
        wait = self._room(now, tokens)
        if wait > 0:
            self.refused += 1
            self.refusals.append(round(now - self.first, 4))
            self.counts["429"] += 1
            reply = rate_limited(max(1, math.ceil(wait)))
            return web.json_response(reply.body, status=reply.status, headers=reply.headers)
        self.window.append((now, tokens))
        self.admitted.append((round(now - self.first, 4), tokens))
        if self.hang_first and len(self.admitted) == 1:
            await asyncio.Event().wait()
        return await self._answer(request, body, tokens)

    async def _answer(self, request: web.Request, body: Body, tokens: int
                      ) -> web.StreamResponse:
        self.counts["/v1/messages"] += 1
        self.requests.append(body)
        if self.delay:
            await asyncio.sleep(self.delay)
        reply = self._next(body)
        reply = Reply(200, {**reply.body, "model": body["model"],
                            "usage": {**reply.body["usage"], "input_tokens": tokens}},
                      reply.headers)
        self.usages.append(reply.body["usage"])
        if body.get("stream"):
            return await self._stream(request, reply)
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)

    async def limits(self, request: web.Request) -> web.Response:
        return web.json_response({"admitted": self.admitted, "refused": self.refused,
                                  "refusals": self.refusals,
                                  "window_s": self.window_s,
                                  "requests": self.limit_requests,
                                  "input_tokens": self.limit_input})


def most_in_any_window(admitted: list[tuple[float, int]], window_s: float) -> tuple[int, int]:
    """The most requests and input tokens admitted within any ``window_s``."""
    most_requests, most_tokens = 0, 0
    for index, (start, _tokens) in enumerate(admitted):
        inside = [t for at, t in admitted[index:] if at < start + window_s]
        most_requests = max(most_requests, len(inside))
        most_tokens = max(most_tokens, sum(inside))
    return most_requests, most_tokens


async def serve(args: argparse.Namespace) -> None:
    await serve_until_stopped(LimitedFake(
        requests=args.requests, input_tokens=args.input_tokens, window_s=args.window,
        hang_first=args.hang_first, responder=tool_loop(args.tool_steps), delay=args.delay),
        args.port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--input-tokens", type=int, default=None)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--tool-steps", type=int, default=1)
    parser.add_argument("--hang-first", action="store_true")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
