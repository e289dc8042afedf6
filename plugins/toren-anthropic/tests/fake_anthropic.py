"""A local stand-in for the Anthropic Messages API, for tests with the real SDK over real HTTP.

It speaks the wire format (``POST /v1/messages``, ``GET /v1/models``, the API's error bodies),
checks the rules the real API enforces on a conversation (alternating roles, non-empty blocks,
tool results right after their calls, tools defined when tool blocks are present, base64
``image`` and ``document`` blocks whose bytes are what their ``media_type`` says, in user turns
and inside ``tool_result`` content), answers from a script in order (then from a responder
function) and counts requests.

With ``cache=PromptCache()`` it also keeps a prompt cache as the API does and bills from it:
``cache_control`` breakpoints (at most 4) write the prefix before them, a later request whose
prefix matches one written (at a breakpoint or up to 20 blocks before one) reads it, and the
answer's ``usage`` says so (``input_tokens`` after the last breakpoint,
``cache_creation_input_tokens``, ``cache_read_input_tokens``), with tokens counted as a block's
JSON length / 4.

In-process: ``FakeAnthropic(script=[...])``, ``await fake.start()``, ``fake.url``. As a process
(for crash tests): ``python fake_anthropic.py --tool-steps 8 --delay 0.3 [--cache]
[--screenshots]`` prints ``{"port": N}`` and serves until killed (``--screenshots``: answers
from ``look_at_screenshots``); ``GET /_fake/stats`` returns the request counts and
``GET /_fake/requests`` every ``/v1/messages`` body with the usage it was billed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hashlib
import itertools
import json
import re
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Body = dict[str, Any]
#: The key the tests present (see conftest.py).
TEST_KEY = "sk-ant-test-key"


@dataclass
class Reply:
    """One scripted HTTP answer."""

    status: int
    body: Body
    headers: dict[str, str] = field(default_factory=dict)


Responder = Callable[[Body], Reply]
ScriptItem = Reply | Responder

_ids = itertools.count(1)


def message(content: Sequence[Body], stop_reason: str = "end_turn", *, input_tokens: int = 25,
            output_tokens: int = 10, cache_read: int | None = None,
            cache_write: int | None = None) -> Reply:
    """A 200 answer shaped like the API's ``Message`` (``model`` is filled from the request)."""
    return Reply(200, {
        "id": f"msg_fake_{next(_ids):04d}", "type": "message", "role": "assistant",
        "model": None, "content": list(content), "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_read_input_tokens": cache_read,
                  "cache_creation_input_tokens": cache_write, "service_tier": "standard"}})


def text(answer: str, **usage: Any) -> Reply:
    return message([{"type": "text", "text": answer}], "end_turn", **usage)


def tool_use(name: str, arguments: Body, *, call_id: str | None = None, say: str = "",
             **usage: Any) -> Reply:
    blocks: list[Body] = [{"type": "text", "text": say}] if say else []
    blocks.append({"type": "tool_use", "id": call_id or f"toolu_fake_{next(_ids):04d}",
                   "name": name, "input": arguments})
    return message(blocks, "tool_use", **usage)


def error(status: int, kind: str, text_: str, headers: dict[str, str] | None = None) -> Reply:
    request_id = f"req_fake_{next(_ids):04d}"
    return Reply(status, {"type": "error", "error": {"type": kind, "message": text_},
                          "request_id": request_id},
                 {"request-id": request_id, **(headers or {})})


def rate_limited(retry_after: float) -> Reply:
    return error(429, "rate_limit_error", "This request would exceed your rate limit.",
                 {"retry-after": f"{retry_after:g}"})


def server_error() -> Reply:
    return error(500, "api_error", "Internal server error")


def overloaded() -> Reply:
    return error(529, "overloaded_error", "Overloaded")


def unauthorized() -> Reply:
    return error(401, "authentication_error", "invalid x-api-key")


def prompt_too_long(tokens: int = 250_000, limit: int = 200_000) -> Reply:
    return error(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {limit} "
                                               "maximum")


def invalid(text_: str) -> Reply:
    return error(400, "invalid_request_error", text_)


def tool_results(body: Body) -> list[Body]:
    """Every ``tool_result`` block of a request, in order."""
    return [block for turn in body.get("messages", []) if isinstance(turn.get("content"), list)
            for block in turn["content"] if block.get("type") == "tool_result"]


#: The media types the API takes for ``image`` and ``document`` blocks, with the signature
#: their bytes start with (WebP's is at offset 8, after ``RIFF`` and a length).
IMAGE_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff",
                    "image/gif": b"GIF8", "image/webp": b"WEBP"}


def source_problem(block: Body, where: str) -> str | None:
    """What the API would reject in an ``image`` or ``document`` block's base64 source."""
    kind, source = block["type"], block.get("source") or {}
    where = f"{where}.{kind}.source"
    if source.get("type") != "base64":
        return f"{where}: this fake takes base64 sources only"
    media_type = source.get("media_type")
    allowed = list(IMAGE_SIGNATURES) if kind == "image" else ["application/pdf"]
    if media_type not in allowed:
        return (f"{where}.base64.media_type: Input should be "
                + " or ".join(repr(t) for t in allowed))
    try:
        data = base64.b64decode(source.get("data") or "", validate=True)
    except (binascii.Error, ValueError):
        return f"{where}.base64.data: invalid base64 data"
    if kind == "document":
        return None if data.startswith(b"%PDF-") else (
            f"{where}.base64.data: The PDF specified was not valid.")
    signature = IMAGE_SIGNATURES[media_type]
    head = data[8:12] if media_type == "image/webp" else data[:len(signature)]
    if head != signature:
        return (f"{where}.base64.data: Image does not match the provided media type "
                f"{media_type}")
    return None


def block_problem(block: Body, where: str, role: str) -> str | None:
    """What the API would reject in one content block (a ``tool_result``'s inner blocks
    included)."""
    kind = block["type"]
    if kind == "text" and not block["text"].strip():
        return f"{where}.text: text content blocks must be non-empty"
    if kind in ("image", "document"):
        if role != "user":
            return f"{where}: {kind} blocks are only allowed in user turns"
        return source_problem(block, where)
    if kind == "tool_result" and isinstance(block.get("content"), list):
        for position, inner in enumerate(block["content"]):
            inside = f"{where}.content.{position}"
            if inner.get("type") not in ("text", "image", "document"):
                return f"{inside}: a tool_result holds text, image and document blocks"
            problem = block_problem(inner, inside, role)
            if problem:
                return problem
    return None


def images(body: Body) -> list[bytes]:
    """The bytes of every ``image`` block of a request (in tool results too), in order."""
    found: list[bytes] = []
    for turn in body.get("messages", []):
        content = turn["content"] if isinstance(turn["content"], list) else []
        for block in content:
            inner = block.get("content") if block.get("type") == "tool_result" else [block]
            for item in inner if isinstance(inner, list) else []:
                if item.get("type") == "image":
                    found.append(base64.b64decode(item["source"]["data"]))
    return found


def look_at_screenshots(body: Body) -> Reply:
    """Stateless responder for the image crash test: calls ``screenshot``, then (having seen
    the image it returned, inside the tool result) ``record`` with what it saw, then answers
    with what it sees. Deterministic, so a call repeated after a crash gets the same answer."""
    results = tool_results(body)
    seen = images(body)
    said = f"saw {len(seen)} image(s) of {sum(map(len, seen))} bytes"
    if not results:
        return tool_use("screenshot", {"page": "home"}, call_id="toolu_shot")
    if len(results) == 1:
        return tool_use("record", {"seen": said}, call_id="toolu_record")
    return text(said)


def conversation_problem(body: Body) -> str | None:
    """What the real API would reject in this request body, or ``None``."""
    if not isinstance(body.get("max_tokens"), int) or not body.get("model"):
        return "model and max_tokens are required"
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        return "messages: the first message must use the \"user\" role"
    tools_defined = bool(body.get("tools"))
    pending: list[str] = []
    for index, turn in enumerate(messages):
        where = f"messages.{index}"
        if index and turn["role"] == messages[index - 1]["role"]:
            return f"{where}: roles must alternate between \"user\" and \"assistant\""
        content = turn["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not content:
            return f"{where}: all messages must have non-empty content"
        results = [b["tool_use_id"] for b in content if b["type"] == "tool_result"]
        if pending:
            leading = [b["tool_use_id"] for b in content[:len(pending)]
                       if b["type"] == "tool_result"]
            if sorted(leading) != sorted(pending):
                return (f"{where}: `tool_use` ids were found without `tool_result` blocks "
                        f"immediately after: {', '.join(pending)}")
        elif results:
            return (f"{where}.content.0: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {results[0]}")
        pending = [b["id"] for b in content if b["type"] == "tool_use"]
        for position, block in enumerate(content):
            if block["type"] in ("tool_use", "tool_result") and not tools_defined:
                return ("Requests which include `tool_use` or `tool_result` blocks must "
                        "define tools.")
            problem = block_problem(block, f"{where}.content.{position}", turn["role"])
            if problem:
                return problem
    if pending:
        return "the conversation ends with tool calls that have no results"
    return None


def output_config_problem(body: Body) -> str | None:
    """What the real API would reject in ``output_config.format`` (structured outputs): a
    format that is not ``json_schema``, or an object type whose ``additionalProperties`` is
    not ``false``."""
    fmt = (body.get("output_config") or {}).get("format")
    if fmt is None:
        return None
    if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        return "output_config.format: expected {\"type\": \"json_schema\", \"schema\": {...}}"
    pending: list[Any] = [fmt["schema"]]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending += node
        if not isinstance(node, dict):
            continue
        if node.get("type") == "object" and node.get("additionalProperties") is not False:
            return ("output_config.format.schema: For 'object' type, 'additionalProperties' "
                    "must be explicitly set to false")
        pending += list(node.values())
    return None


def tokens(unit: Body) -> int:
    """The fake's token count of one block: its JSON length / 4 (at least 1)."""
    return max(1, len(json.dumps(unit, sort_keys=True)) // 4)


def prompt_units(body: Body) -> list[tuple[Body, bool]]:
    """The request's prompt as the API caches it, tools, then system, then messages: one unit
    per tool definition or content block (its turn and role included, its ``cache_control``
    left out), each with whether it carries a breakpoint."""
    units: list[tuple[Body, bool]] = []

    def add(unit: Body, block: Body) -> None:
        bare = {key: value for key, value in block.items() if key != "cache_control"}
        units.append(({**unit, "block": bare}, "cache_control" in block))

    for tool in body.get("tools") or ():
        add({"at": "tools"}, tool)
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or ():
        add({"at": "system"}, block)
    for index, turn in enumerate(body.get("messages") or ()):
        content = turn["content"]
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            add({"at": "messages", "turn": index, "role": turn["role"]}, block)
    return units


class PromptCache:
    """The API's prompt cache, as far as billing sees it.

    Args:
        min_tokens: the shortest prefix cached (1,024 for Sonnet; a shorter one is neither
            written nor read, without an error).
        ttl_s: how long an entry lives after it was last written or read.
        lookback: how many blocks before a breakpoint a hit is looked for.
    """

    def __init__(self, *, min_tokens: int = 1024, ttl_s: float = 300.0,
                 lookback: int = 20) -> None:
        self.min_tokens = min_tokens
        self.ttl_s = ttl_s
        self.lookback = lookback
        #: prefix digest -> when it expires (``time.monotonic()``)
        self.entries: dict[str, float] = {}

    def problem(self, body: Body) -> str | None:
        """What the real API rejects about the request's breakpoints, or ``None``."""
        marks = [block for block, marked in prompt_units(body) if marked]
        if len(marks) > 4:
            return (f"A maximum of 4 blocks with cache_control may be provided. Found "
                    f"{len(marks)}.")
        for unit in marks:
            if unit["block"].get("type") in ("thinking", "redacted_thinking"):
                return f"{unit['at']}: cache_control cannot be set for thinking blocks"
        return None

    def bill(self, body: Body) -> tuple[int, int, int]:
        """``(input_tokens, cache_read_tokens, cache_write_tokens)`` of the request, reading
        and writing the cache as the API does."""
        now = time.monotonic()
        units = prompt_units(body)
        digests: list[str] = []
        totals: list[int] = []
        digest, total = "", 0
        for unit, _marked in units:
            digest = hashlib.sha256((digest + json.dumps(unit, sort_keys=True)).encode()
                                    ).hexdigest()
            total += tokens(unit)
            digests.append(digest)
            totals.append(total)
        breakpoints = [index for index, (_unit, marked) in enumerate(units) if marked]
        hit = -1
        for point in breakpoints:
            for index in range(point, max(-1, point - self.lookback - 1), -1):
                if self.entries.get(digests[index], 0.0) > now:
                    hit = max(hit, index)
                    break
        read = totals[hit] if hit >= 0 else 0
        if hit >= 0:
            self.entries[digests[hit]] = now + self.ttl_s
        written_to = hit
        for point in breakpoints:
            if totals[point] >= self.min_tokens:
                self.entries[digests[point]] = now + self.ttl_s
                written_to = max(written_to, point)
        written = totals[written_to] - read if written_to > hit else 0
        return total - read - written, read, written


class FakeAnthropic:
    """The fake API server.

    Args:
        script: answers for ``POST /v1/messages`` in order; each a ``Reply`` or a function of
            the request body returning one.
        responder: answers requests once the script is used up (default: 500, so a test that
            makes more calls than scripted fails loudly).
        delay: seconds to wait before each ``/v1/messages`` answer.
        api_key: if set, requests presenting another key get 401 (like a revoked key).
        models_reply: if set, what ``GET /v1/models`` answers to a request with a valid key
            (an outage: ``server_error()``; a gateway without the list: a 404).
        models_delay: seconds to wait before each ``/v1/models`` answer (a hung API).
        stream_delay: seconds between the deltas of a streamed answer.
        cache: a ``PromptCache``: answers' input and cache usage are billed from it (their
            output tokens are the script's).
    """

    def __init__(self, script: Sequence[ScriptItem] = (), *, responder: Responder | None = None,
                 delay: float = 0.0, api_key: str | None = None,
                 models_reply: Reply | None = None, models_delay: float = 0.0,
                 stream_delay: float = 0.0, cache: PromptCache | None = None) -> None:
        self.script = list(script)
        self.cache = cache
        #: The ``usage`` of each 200 answer to ``/v1/messages``, in order (``None`` for others).
        self.usages: list[Body | None] = []
        self.stream_delay = stream_delay
        #: ``time.monotonic()`` of each streamed delta as it was written.
        self.deltas_sent_at: list[float] = []
        self.models_reply = models_reply
        self.models_delay = models_delay
        self.responder = responder
        self.delay = delay
        self.api_key = api_key
        #: ``/v1/messages`` request bodies, in arrival order.
        self.requests: list[Body] = []
        #: Requests per path.
        self.counts: Counter[str] = Counter()
        #: Headers of each ``/v1/messages`` request, names in lower case.
        self.headers: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        assert self.port is not None, "start() the fake first"
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/_fake/stats", self.stats)
        app.router.add_get("/_fake/requests", self.requests_made)
        return app

    async def start(self, port: int = 0) -> FakeAnthropic:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- handlers ------------------------------------------------------------------------------

    def _auth_problem(self, request: web.Request) -> Reply | None:
        presented = request.headers.get("x-api-key") or request.headers.get(
            "authorization", "").removeprefix("Bearer ")
        if not presented:
            return error(401, "authentication_error", "x-api-key header is required")
        if self.api_key is not None and presented != self.api_key:
            return unauthorized()
        return None

    async def messages(self, request: web.Request) -> web.Response:
        self.counts["/v1/messages"] += 1
        body = await request.json()
        index = len(self.requests)
        self.requests.append(body)
        self.usages.append(None)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        if self.delay:
            await asyncio.sleep(self.delay)
        reply = self._auth_problem(request)
        if reply is None:
            problem = (conversation_problem(body) or output_config_problem(body)
                       or (self.cache.problem(body) if self.cache else None))
            reply = invalid(problem) if problem else self._next(body)
        if reply.status == 200 and reply.body.get("model") is None:
            reply = Reply(200, {**reply.body, "model": body["model"]}, reply.headers)
        if reply.status == 200 and self.cache is not None:
            billed, read, written = self.cache.bill(body)
            reply = Reply(200, {**reply.body, "usage": {
                **reply.body["usage"], "input_tokens": billed,
                "cache_read_input_tokens": read, "cache_creation_input_tokens": written}},
                reply.headers)
        if reply.status == 200:
            self.usages[index] = reply.body["usage"]
        if reply.status == 200 and body.get("stream"):
            return await self._stream(request, reply)
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)

    async def _stream(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        """The message as the API streams it (server-sent events): ``message_start``, per
        content block a start, deltas (text a word at a time, tool input in two halves) and a
        stop, then ``message_delta`` and ``message_stop``; ``stream_delay`` between events."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               **reply.headers})
        await response.prepare(request)
        for name, data in stream_events(reply.body):
            await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            if name == "content_block_delta":
                self.deltas_sent_at.append(time.monotonic())
                if self.stream_delay:
                    await asyncio.sleep(self.stream_delay)
        await response.write_eof()
        return response

    def _next(self, body: Body) -> Reply:
        if self.script:
            item = self.script.pop(0)
            return item(body) if callable(item) else item
        if self.responder is not None:
            return self.responder(body)
        return error(500, "api_error", "the fake's script is used up")

    async def models(self, request: web.Request) -> web.Response:
        self.counts["/v1/models"] += 1
        if self.models_delay:
            await asyncio.sleep(self.models_delay)
        reply = self._auth_problem(request) or self.models_reply
        if reply is not None:
            return web.json_response(reply.body, status=reply.status, headers=reply.headers)
        limit = int(request.query.get("limit", "20"))
        data = [{"type": "model", "id": model_id, "display_name": model_id,
                 "created_at": "2026-09-22T00:00:00Z", "lifecycle": "active"}
                for model_id in ("claude-sonnet-4-6", "claude-haiku-4-5")][:limit]
        return web.json_response({"data": data, "has_more": False,
                                  "first_id": data[0]["id"], "last_id": data[-1]["id"]})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.counts))

    async def requests_made(self, request: web.Request) -> web.Response:
        return web.json_response([{"body": body, "usage": usage}
                                  for body, usage in zip(self.requests, self.usages,
                                                         strict=True)])


def stream_events(message_body: Body) -> list[tuple[str, Body]]:
    """The server-sent events that stream ``message_body`` (a ``Message``'s JSON)."""
    usage = dict(message_body["usage"])
    start = {**message_body, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, Body]] = [("message_start", {"type": "message_start",
                                                         "message": start})]
    for index, block in enumerate(message_body["content"]):
        kind = block["type"]
        deltas: list[Body] = []
        if kind == "text":
            opening: Body = {"type": "text", "text": ""}
            words = re.findall(r"\S*\s+|\S+$", block["text"]) or [""]
            deltas = [{"type": "text_delta", "text": word} for word in words]
        elif kind == "tool_use":
            opening = {**block, "input": {}}
            raw = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": part}
                      for part in (raw[:len(raw) // 2], raw[len(raw) // 2:])]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block.get("signature", "")}]
        else:
            opening = block
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": opening}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": delta}) for delta in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message_body["stop_reason"],
                  "stop_sequence": message_body.get("stop_sequence")},
        "usage": {"output_tokens": usage["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


#: The ``fake_anthropic`` fixture: ``await make(script, **options)`` -> a started fake.
FakeFactory = Callable[..., Awaitable["FakeAnthropic"]]


def tool_loop(steps: int, tool: str = "step") -> Responder:
    """Calls ``tool`` until the conversation holds ``steps`` tool results, then answers.

    Stateless (decided from the request alone), so any number of workers and restarts agree.
    """

    def respond(body: Body) -> Reply:
        done = len(tool_results(body))
        if done < steps:
            return tool_use(tool, {"n": done + 1}, call_id=f"toolu_step_{done + 1:02d}")
        return text(f"finished {done} steps")

    return respond


async def serve(args: argparse.Namespace) -> None:
    responder = look_at_screenshots if args.screenshots else tool_loop(args.tool_steps)
    await serve_until_stopped(FakeAnthropic(
        responder=responder, delay=args.delay,
        cache=PromptCache(min_tokens=args.cache_min_tokens) if args.cache else None), args.port)


async def serve_until_stopped(fake: FakeAnthropic, port: int) -> None:
    """Start ``fake`` on ``port``, print ``{"port": N}``, serve until SIGTERM or SIGINT."""
    await fake.start(port)
    print(json.dumps({"port": fake.port}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--tool-steps", type=int, default=8)
    parser.add_argument("--cache", action="store_true", help="keep and bill a prompt cache")
    parser.add_argument("--cache-min-tokens", type=int, default=1024)
    parser.add_argument("--screenshots", action="store_true",
                        help="answer with look_at_screenshots (the image crash test)")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
