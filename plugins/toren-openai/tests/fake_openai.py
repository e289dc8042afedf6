"""A local fake of the OpenAI Chat Completions API (aiohttp), for tests with the real SDK.

It speaks the wire format (``POST /v1/chat/completions``, ``GET /v1/models``, errors as
``{"error": {"message", "type", "param", "code"}}``), answers from a script in order (then from
a responder function), records every request body and counts requests per path. Run it as a
script to serve from its own process: it prints ``{"port": N, "url": ...}`` on one line, and
``GET /_fake/stats`` returns the counts (``--screenshots``: answers from
``look_at_screenshots``).

It refuses, as OpenAI does (``conversation_problem``), a tool message that does not answer a
call of the assistant message right before it (other tool messages of that turn aside), an
assistant message whose calls are not all answered before the next message, content parts a
role cannot have (images and files are for user messages), an ``image_url`` whose ``data:``
URL is not a PNG, JPEG, GIF or WebP in base64, a ``file`` whose ``file_data`` is not a PDF,
and any image sent to a model that takes none (``gpt-3.5-turbo``).

A ``response_format`` of type ``json_schema`` with ``strict: true`` is checked as OpenAI checks
it: a schema strict mode cannot take (an object allowing other properties or leaving one
optional) is a 400 ``invalid_json_schema``. ``repair_once`` (``--structured`` as a process)
answers a structured request with text that is not JSON, then, after Toren's repair turn, with
``STRUCTURED_ANSWER``.

With ``cache=PrefixCache()`` it caches prompts as OpenAI does, on its own: a prompt of 1,024
tokens or more is cached, and a later prompt that starts with a cached one reports that much
(in steps of 128 tokens) as ``usage.prompt_tokens_details.cached_tokens``, with tokens counted as
a tool list's or a message's JSON length / 4. Nothing marks a breakpoint; writing costs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"


@dataclass(frozen=True)
class Fail:
    """An error answer: HTTP ``status`` with an OpenAI-style error body and extra headers."""

    status: int
    message: str
    code: str | None = None
    type: str = "invalid_request_error"
    param: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def rate_limited(retry_after: str = "1", **headers: str) -> Fail:
    return Fail(429, "Rate limit reached for requests", code="rate_limit_exceeded",
                type="requests", headers={"retry-after": retry_after, **headers})


def context_too_long(tokens: int = 200_000) -> Fail:
    return Fail(400, f"This model's maximum context length is 128000 tokens. However, your "
                     f"messages resulted in {tokens} tokens. Please reduce the length of the "
                     "messages.", code="context_length_exceeded", param="messages")


def usage(prompt: int = 10, completion: int = 5, cached: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                            "total_tokens": prompt + completion}
    if cached is not None:
        data["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        data["completion_tokens_details"] = {"reasoning_tokens": 0, "audio_tokens": 0}
    return data


def tool_call(name: str, arguments: str | Mapping[str, Any], call_id: str | None = None
              ) -> dict[str, Any]:
    """A ``tool_calls`` entry; ``arguments`` is sent verbatim when it is a string."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": text}}


def completion(text: str | None = None, tool_calls: Iterable[Mapping[str, Any]] = (),
               *, finish_reason: str | None = None, usage_data: Mapping[str, Any] | None = None,
               model: str = "gpt-4o-mini") -> dict[str, Any]:
    """A ``chat.completion`` object as OpenAI returns it."""
    calls = list(tool_calls)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None,
                               "annotations": []}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
        "created": int(time.time()), "model": model, "system_fingerprint": "fp_fake",
        "service_tier": "default",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}],
        "usage": dict(usage_data) if usage_data is not None else usage(),
    }


def completion_chunks(answer: Mapping[str, Any], *, include_usage: bool
                      ) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects that stream ``answer`` (a completion): the role,
    the content a word at a time, each tool call (its arguments in two halves), the finish
    reason, and the usage when asked for."""
    if not answer.get("choices"):
        return [dict(answer)]  # not a completion (a proxy's error): sent as it is
    choice = answer["choices"][0]
    message = choice.get("message") or {}
    base = {"id": answer.get("id", "chatcmpl-fake"), "object": "chat.completion.chunk",
            "created": answer.get("created", 0), "model": answer.get("model", ""),
            "system_fingerprint": "fp_fake"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for word in re.findall(r"\S*\s+|\S+$", message.get("content") or ""):
        chunks.append(chunk({"content": word}))
    for index, call in enumerate(message.get("tool_calls") or ()):
        arguments = call["function"].get("arguments") or ""
        chunks.append(chunk({"tool_calls": [{
            "index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        for part in (arguments[:len(arguments) // 2], arguments[len(arguments) // 2:]):
            chunks.append(chunk({"tool_calls": [{"index": index,
                                                 "function": {"arguments": part}}]}))
    chunks.append(chunk({}, choice.get("finish_reason")))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": answer.get("usage")})
    return chunks


Answer = dict[str, Any] | Fail
Responder = Callable[[dict[str, Any]], Answer]


def text_of(content: Any) -> str:
    """A message's text: its string content, or its text parts joined."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return content or ""


def prompt_chars(body: Mapping[str, Any]) -> int:
    """Characters of content in a request's messages (what a context limit is about)."""
    total = 0
    for message in body.get("messages", ()):
        total += len(text_of(message.get("content")))
        total += len(json.dumps(message.get("tool_calls") or ""))
    return total


#: The image formats OpenAI takes, by the signature their bytes start with (WebP's is at
#: offset 8, after ``RIFF`` and a length).
IMAGE_SIGNATURES = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff", "gif": b"GIF8",
                    "webp": b"WEBP"}
#: Models that take no images (the fake's stand-in for OpenAI's list).
TEXT_ONLY_MODELS = ("gpt-3.5",)


def data_url(url: str) -> tuple[str, bytes] | None:
    """A base64 ``data:`` URL's media type and bytes, or ``None``."""
    head, comma, encoded = url.partition(",")
    if not comma or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    try:
        return head[5:-7], base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None


def is_image(data: bytes) -> bool:
    return any((data[8:12] if kind == "webp" else data[:len(signature)]) == signature
               for kind, signature in IMAGE_SIGNATURES.items())


def part_problem(part: Mapping[str, Any], where: str, role: str, model: str) -> Fail | None:
    """OpenAI's 400 for one content part, or ``None``."""
    kind = part.get("type")
    allowed = ("text", "image_url", "file") if role == "user" else ("text",)
    if kind not in allowed:
        return Fail(400, f"Invalid '{where}': content parts of type '{kind}' are not allowed "
                         f"in messages with role '{role}'.", code="invalid_value", param=where)
    if kind == "text" and not isinstance(part.get("text"), str):
        return Fail(400, f"Invalid '{where}.text': expected a string.", param=where)
    if kind == "image_url":
        if model.startswith(TEXT_ONLY_MODELS):
            return Fail(400, "Invalid content type. image_url is only supported by certain "
                             "models.", code="invalid_value", param=where)
        found = data_url((part.get("image_url") or {}).get("url") or "")
        if found is None or not is_image(found[1]):
            return Fail(400, "You uploaded an unsupported image. Please make sure your image "
                             "has of one the following formats: ['png', 'jpeg', 'gif', "
                             "'webp'].", code="invalid_image_format", param=where)
    if kind == "file":
        file = part.get("file") or {}
        found = data_url(file.get("file_data") or "")
        if not file.get("filename") or found is None or found[0] != "application/pdf" \
                or not found[1].startswith(b"%PDF-"):
            return Fail(400, f"Invalid '{where}.file': expected a filename and file_data, a "
                             "base64 data: URL of a PDF.", code="invalid_value", param=where)
    return None


def conversation_problem(body: Mapping[str, Any]) -> Fail | None:
    """OpenAI's 400 for the request's messages (see the module's docstring), or ``None``."""
    model = str(body.get("model") or "")
    unanswered: list[str] = []  # calls of the last assistant message without a result yet
    answering = False  # the previous message was that assistant message or one of its results
    for index, message in enumerate(body.get("messages", ())):
        where = f"messages[{index}]"
        role = message.get("role")
        if role == "tool":
            if not answering or message.get("tool_call_id") not in unanswered:
                return Fail(400, "Invalid parameter: messages with role 'tool' must be a "
                                 "response to a preceeding message with 'tool_calls'.",
                            param=f"{where}.role")
            unanswered.remove(message["tool_call_id"])
        elif unanswered:
            return Fail(400, "An assistant message with 'tool_calls' must be followed by tool "
                             "messages responding to each 'tool_call_id'. The following "
                             f"tool_call_ids did not have response messages: "
                             f"{', '.join(unanswered)}", param=f"{where}.role")
        if role == "assistant":
            unanswered = [call.get("id") for call in message.get("tool_calls") or ()]
        answering = role in ("assistant", "tool") and bool(unanswered or role == "tool")
        content = message.get("content")
        for position, part in enumerate(content if isinstance(content, list) else ()):
            problem = part_problem(part, f"{where}.content[{position}]", role, model)
            if problem is not None:
                return problem
    if unanswered:
        return Fail(400, "An assistant message with 'tool_calls' must be followed by tool "
                         "messages responding to each 'tool_call_id'. The following "
                         f"tool_call_ids did not have response messages: "
                         f"{', '.join(unanswered)}", param="messages")
    return None


def images(body: Mapping[str, Any]) -> list[bytes]:
    """The bytes of every ``image_url`` part of a request, in order."""
    found: list[bytes] = []
    for message in body.get("messages", ()):
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if part.get("type") == "image_url":
                decoded = data_url(part["image_url"]["url"])
                if decoded is not None:
                    found.append(decoded[1])
    return found


def look_at_screenshots(body: Mapping[str, Any]) -> Answer:
    """Stateless responder for the image tests: calls ``screenshot``, then (having seen the
    image it returned, in the user message after the tool message) ``record`` with what it
    saw, then answers with what it sees. Deterministic, so a call repeated after a crash gets
    the same answer."""
    results = [m for m in body.get("messages", ()) if m.get("role") == "tool"]
    seen = images(body)
    said = f"saw {len(seen)} image(s) of {sum(map(len, seen))} bytes"
    spent = usage(prompt=5000, completion=12)
    if not results:
        return completion(None, [tool_call("screenshot", {"page": "home"}, call_id="call_shot")],
                          usage_data=spent)
    if len(results) == 1:
        return completion(None, [tool_call("record", {"seen": said}, call_id="call_record")],
                          usage_data=spent)
    return completion(said, usage_data=spent)


def call_each_tool(body: Mapping[str, Any]) -> Answer:
    """Stateless responder: calls the offered tools one per step, in order, with the latest
    user text, then answers with the results. Deterministic, so a repeated call (after a crash)
    gets the same answer as the first."""
    messages = list(body.get("messages", ()))
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    text = text_of(messages[last_user].get("content")) if last_user >= 0 else ""
    turn = messages[last_user + 1:]
    called = sum(1 for m in turn if m.get("role") == "assistant" and m.get("tool_calls"))
    tools = body.get("tools") or []
    spent = usage(prompt=max(1, prompt_chars(body) // 4), completion=12)
    if called < len(tools):
        name = tools[called]["function"]["name"]
        return completion(None, [tool_call(name, {"text": text},
                                           call_id=f"call_{last_user + 1}_{called}")],
                          usage_data=spent)
    results = [m.get("content", "") for m in turn if m.get("role") == "tool"]
    return completion("; ".join(results) or f"You said: {text}", usage_data=spent)


#: What ``repair_once`` answers once it has been told its first answer was not JSON.
STRUCTURED_ANSWER = {"topics": ["durable execution", "event sourcing"]}


def repair_once(body: Mapping[str, Any]) -> Answer:
    """Stateless responder for structured requests: the first answer of a conversation is
    prose, not JSON; any later one (after a repair turn) is ``STRUCTURED_ANSWER``.
    Deterministic, so a call repeated after a crash gets the same answer."""
    answered = sum(1 for m in body.get("messages", ())
                   if m.get("role") == "assistant" and not m.get("tool_calls"))
    spent = usage(prompt=max(1, prompt_chars(body) // 4), completion=20)
    if not answered:
        return completion("The topics are durable execution and event sourcing.",
                          usage_data=spent)
    return completion(json.dumps(STRUCTURED_ANSWER), usage_data=spent)


def strict_schema_error(body: Mapping[str, Any]) -> Fail | None:
    """OpenAI's 400 for a strict ``json_schema`` response format it cannot take."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    if not spec.get("strict"):
        return None
    pending: list[Any] = [spec.get("schema")]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending += node
        if not isinstance(node, dict):
            continue
        if node.get("type") == "object":
            if node.get("additionalProperties") is not False:
                return Fail(400, f"Invalid schema for response_format '{spec.get('name')}': "
                                 "In context=(), 'additionalProperties' is required to be "
                                 "supplied and to be false.", code="invalid_json_schema",
                            param="response_format")
            if set(node.get("required", ())) != set(node.get("properties", {})):
                return Fail(400, f"Invalid schema for response_format '{spec.get('name')}': "
                                 "In context=(), 'required' is required to be supplied and to "
                                 "be an array including every key in properties.",
                            code="invalid_json_schema", param="response_format")
        pending += list(node.values())
    return None


class PrefixCache:
    """OpenAI's automatic prompt cache, as far as billing sees it.

    Args:
        min_tokens: the shortest prompt cached (1,024).
        step: cached prefixes count in steps of this many tokens past the minimum (128).
    """

    def __init__(self, *, min_tokens: int = 1024, step: int = 128) -> None:
        self.min_tokens = min_tokens
        self.step = step
        self.prefixes: set[str] = set()

    @staticmethod
    def units(body: Mapping[str, Any]) -> list[Any]:
        """What the prompt is made of, in order: the tools, then each message."""
        return [body.get("tools") or [], *body.get("messages", ())]

    def bill(self, body: Mapping[str, Any]) -> tuple[int, int]:
        """``(prompt_tokens, cached_tokens)`` of a request; caches its prompt."""
        digest, total, cached = "", 0, 0
        seen: list[tuple[str, int]] = []
        for unit in self.units(body):
            digest = hashlib.sha256((digest + json.dumps(unit, sort_keys=True)).encode()
                                    ).hexdigest()
            total += max(1, len(json.dumps(unit, sort_keys=True)) // 4)
            seen.append((digest, total))
            if digest in self.prefixes:
                cached = total
        if cached >= self.min_tokens:
            cached = self.min_tokens + (cached - self.min_tokens) // self.step * self.step
        else:
            cached = 0
        self.prefixes.update(digest for digest, tokens in seen if tokens >= self.min_tokens)
        return total, cached


class FakeOpenAI:
    """The fake server. ``script`` answers are used in order, then ``responder``.

    Args:
        script: answers (completion dicts, ``Fail``s, or functions of the request body).
        responder: answers once the script is used up (default: ``call_each_tool``).
        delay_s: seconds to wait before each chat answer (a slow model).
        max_prompt_chars: reject any chat request with more content than this with a 400
            ``context_length_exceeded`` (checked before the script).
        models_status: status of ``GET /v1/models`` (e.g. 401, 404 for a server without it, or
            503 for an outage).
        models_delay_s: seconds to wait before each ``GET /v1/models`` answer (a hung server).
        models: ids ``GET /v1/models`` lists.
        stream_delay_s: seconds between the content chunks of a streamed answer.
        stream_as_json: answer a stream request with the plain JSON completion, as some
            compatible servers and proxies do (they ignore ``stream``).
        cache: a ``PrefixCache``: answers' prompt and cached token counts are billed from it.
    """

    def __init__(self, script: Iterable[Answer | Responder] = (), *,
                 responder: Responder = call_each_tool, delay_s: float = 0.0,
                 max_prompt_chars: int | None = None, models_status: int = 200,
                 models: Iterable[str] = ("gpt-4o-mini", "gpt-4o"),
                 models_delay_s: float = 0.0, stream_delay_s: float = 0.0,
                 cache: PrefixCache | None = None, stream_as_json: bool = False) -> None:
        self.script: list[Answer | Responder] = list(script)
        self.stream_as_json = stream_as_json
        self.cache = cache
        self.stream_delay_s = stream_delay_s
        #: ``time.monotonic()`` of each streamed content chunk as it was written.
        self.first_content_at: list[float] = []
        self.responder = responder
        self.delay_s = delay_s
        self.max_prompt_chars = max_prompt_chars
        self.models_status = models_status
        self.models = list(models)
        self.models_delay_s = models_delay_s
        #: Every chat request body, in arrival order.
        self.requests: list[dict[str, Any]] = []
        #: Every request's Authorization header, in arrival order.
        self.authorizations: list[str | None] = []
        #: Requests per path (all methods).
        self.counts: Counter[str] = Counter()
        #: Statuses answered to chat requests, in order.
        self.statuses: list[int] = []
        #: The ``usage`` of each completion answered, in order (what the provider bills).
        self.usages: list[dict[str, Any]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(CHAT_PATH, self.chat)
        app.router.add_get(MODELS_PATH, self.list_models)
        app.router.add_get("/_fake/stats", self.stats)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: any free port); return the base URL (``.../v1``)."""
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}/v1"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def chat_requests(self) -> int:
        return self.counts[CHAT_PATH]

    async def chat(self, request: web.Request) -> web.Response:
        self.counts[CHAT_PATH] += 1
        self.authorizations.append(request.headers.get("Authorization"))
        body = await request.json()
        self.requests.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        answer: Answer | Responder
        refused = conversation_problem(body) or strict_schema_error(body)
        if refused is not None:
            answer = refused
        elif self.max_prompt_chars is not None and prompt_chars(body) > self.max_prompt_chars:
            answer = context_too_long(prompt_chars(body) // 4)
        elif self.script:
            answer = self.script.pop(0)
        else:
            answer = self.responder
        if callable(answer):
            answer = answer(body)
        if self.cache is not None and not isinstance(answer, Fail):
            prompt, cached = self.cache.bill(body)
            completion_tokens = (answer.get("usage") or {}).get("completion_tokens", 0)
            answer = {**answer, "usage": usage(prompt, completion_tokens, cached)}
        self.statuses.append(answer.status if isinstance(answer, Fail) else 200)
        if not isinstance(answer, Fail) and isinstance(answer.get("usage"), dict):
            self.usages.append(answer["usage"])
        if body.get("stream") and not isinstance(answer, Fail) and not self.stream_as_json:
            return await self._stream(request, answer, body)
        return self._respond(answer)

    async def _stream(self, request: web.Request, answer: dict[str, Any],
                      body: dict[str, Any]) -> web.StreamResponse:
        """``answer`` as OpenAI streams it: ``chat.completion.chunk`` events (``data:`` lines),
        usage last when ``stream_options.include_usage`` asks, then ``data: [DONE]``;
        ``stream_delay_s`` between content chunks."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for chunk in completion_chunks(answer, include_usage=include_usage):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            choices = chunk.get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                self.first_content_at.append(time.monotonic())
                if self.stream_delay_s:
                    await asyncio.sleep(self.stream_delay_s)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def list_models(self, request: web.Request) -> web.Response:
        self.counts[MODELS_PATH] += 1
        self.authorizations.append(request.headers.get("Authorization"))
        if self.models_delay_s:
            await asyncio.sleep(self.models_delay_s)
        if self.models_status == 401:
            return self._respond(Fail(401, "Incorrect API key provided: sk-bad. You can find "
                                           "your API key at https://platform.openai.com/"
                                           "account/api-keys.", code="invalid_api_key"))
        if self.models_status >= 500:
            return self._respond(Fail(self.models_status, "The server is overloaded or not "
                                      "ready yet.", code=None, type="server_error"))
        if self.models_status != 200:
            return self._respond(Fail(self.models_status, "404 page not found",
                                      code=None, type="not_found"))
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": 1715367049, "owned_by": "system"}
            for name in self.models]})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"counts": dict(self.counts), "statuses": self.statuses})

    def _respond(self, answer: Answer) -> web.Response:
        if isinstance(answer, Fail):
            return web.json_response(answer.body(), status=answer.status,
                                     headers=dict(answer.headers))
        return web.json_response(answer)


async def _serve(delay_s: float, port: int, structured: bool = False,
                 screenshots: bool = False) -> None:
    responder = (repair_once if structured else look_at_screenshots if screenshots
                 else call_each_tool)
    fake = FakeOpenAI(delay_s=delay_s, responder=responder)
    url = await fake.start(port=port)
    print(json.dumps({"port": int(url.rsplit(":", 1)[1].split("/")[0]), "url": url}),
          flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds per chat answer")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--structured", action="store_true",
                        help="answer with repair_once (prose first, then STRUCTURED_ANSWER)")
    parser.add_argument("--screenshots", action="store_true",
                        help="answer with look_at_screenshots (the image crash test)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.delay, args.port, args.structured, args.screenshots))


if __name__ == "__main__":
    main()
