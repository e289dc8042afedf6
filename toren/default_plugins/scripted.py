"""The offline model ``toren/scripted``: deterministic, free, no network, no key.

With no script it behaves like a diligent agent: it calls each of the agent's tools once, in
order, with arguments made from the user's input, then answers with what the tools returned.
An input that is a JSON object with ``toolCalls`` (a list of ``{"name": ..., "arguments":
{...}}``) makes it call exactly those tools, one per step, in that order, instead. Asked for
an output schema (``output:``), it answers with the latest tool result that is JSON matching
the schema, else with a value made from the schema (the user's text in its strings).
The module also registers the offline embedder ``toren/hash``
(``toren.default_plugins.hash_embedder``) for ``memory.embeddings``. Environment knobs (read
when the model is made): ``TOREN_SCRIPTED_DELAY`` (seconds per call),
``TOREN_SCRIPTED_CALL_LOG`` (a file that gets one JSON line per call, a counter that lives
outside the database for crash tests) and ``TOREN_SCRIPTED_COST_USD`` (cost of each call).
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from toren.core.attachments import estimated_tokens
from toren.default_plugins.hash_embedder import HashEmbedder
from toren.errors import ConfigError
from toren.seams.embedders import Embedder
from toren.seams.hookspecs import hookimpl
from toren.seams.model import (
    SHOWABLE_TYPES,
    Message,
    Model,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OnText,
    ToolCall,
    ToolSpec,
    Usage,
)

Script = Sequence[ModelResponse] | Callable[[ModelRequest], ModelResponse]


class ScriptedModel(Model):
    """A model whose answers are computed, not generated.

    It takes images and PDFs (``input_types``): its answers end with a line per file it was
    shown in the latest turn, with the bytes it received, so a test can see what arrived.

    Args:
        model_id: the id it answers to.
        script: a list of responses returned in turn (the last one repeats), or a function of
            the request; ``None`` means the built-in tool-calling behaviour.
        delay: seconds to sleep in each call (simulates a slow provider).
        call_log: a file to append one JSON line to per call.
        cost_usd: the cost recorded for each call.
    """

    def __init__(
        self,
        model_id: str = "toren/scripted",
        *,
        script: Script | None = None,
        delay: float = 0.0,
        call_log: str | Path | None = None,
        cost_usd: float = 0.0,
    ) -> None:
        self.model_id = model_id
        self.script = script
        self.delay = delay
        self.call_log = Path(call_log) if call_log else None
        self.cost_usd = cost_usd
        #: Calls made through this instance (in this process).
        self.calls = 0

    input_types = SHOWABLE_TYPES

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self._answer(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        return response

    async def stream(self, request: ModelRequest, on_text: OnText) -> ModelResponse:
        """The answer's text in pieces of a word or so: half of ``delay`` passes before the
        first piece (the time to first token), the other half is spread between the pieces.

        A subclass that overrides ``complete`` (a test's model that fails or rewrites answers)
        is streamed as the base ``Model`` streams: one ``complete`` call, its text at once."""
        if type(self).complete is not ScriptedModel.complete:
            return await super().stream(request, on_text)
        response = await self._answer(request)
        pieces = text_pieces(response.text)
        if self.delay:
            await asyncio.sleep(self.delay / 2)
        if not self.delay:  # no time passes between the pieces: no turn of the loop either
            for piece in pieces:
                on_text(piece)
            return response
        for piece in pieces:
            on_text(piece)
            # a real stream's pieces arrive in separate reads: let watchers see each one
            await asyncio.sleep(self.delay / 2 / len(pieces))
        if not pieces:
            await asyncio.sleep(self.delay / 2)
        return response

    async def _answer(self, request: ModelRequest) -> ModelResponse:
        index = self.calls
        self.calls += 1
        if self.call_log is not None:
            # logged when the call starts, as a provider bills a request it received: a call
            # cut short by a crash counts as paid
            line = json.dumps({"pid": os.getpid(), "model": self.model_id, "call": index,
                               "messages": len(request.messages), "at": time.time(),
                               "attachments": [[a.name, len(request.attachment_data[a.file_id])]
                                               for a in request.attachments]})
            await asyncio.to_thread(_append_line, self.call_log, line)
        if self.script is None:
            response = respond_with_tools(request)
        elif callable(self.script):
            response = self.script(request)
        else:
            response = self.script[min(index, len(self.script) - 1)]
        return ModelResponse(
            text=response.text, tool_calls=response.tool_calls, stop_reason=response.stop_reason,
            usage=response.usage if response.usage != Usage() else _usage(request, response),
            model=self.model_id, cost_usd=self.cost_usd,
        )

    def worst_case_cost_usd(self, request: ModelRequest) -> float | None:
        """Every call costs exactly ``cost_usd`` (free by default): a budget reserves that much
        unless the agent sets ``pricing:`` for the model."""
        return self.cost_usd


def text_pieces(text: str) -> list[str]:
    """``text`` cut after each run of whitespace (a word and the space after it), as a model
    streams it; the pieces joined are ``text``."""
    return re.findall(r"\S*\s+|\S+$", text) if text else []


def _append_line(path: Path, line: str) -> None:
    # O_APPEND writes of one short line are atomic, so concurrent processes never interleave.
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def _usage(request: ModelRequest, response: ModelResponse) -> Usage:
    """Token counts estimated at four characters a token (and attachments by the published
    formula), so receipts show plausible figures."""
    prompt = len(request.system) + sum(map(len, map(_text, request.messages)))
    output = len(response.text) + sum(len(json.dumps(c.arguments)) for c in response.tool_calls)
    images = sum(map(estimated_tokens, request.attachments))
    return Usage(input_tokens=max(1, prompt // 4) + images, output_tokens=max(1, output // 4),
                 image_tokens=images)


_text = operator.attrgetter("text")


def _turn(messages: Sequence[Message]) -> tuple[int, int]:
    """Where the latest user message is (-1: none), and how many assistant messages with tool
    calls came after it: one pass back from the end, which stops at that message."""
    called = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user":
            return index, called
        if message.role == "assistant" and message.tool_calls:
            called += 1
    return -1, called


def respond_with_tools(request: ModelRequest) -> ModelResponse:
    """Call each offered tool once (in order) on the latest user input, then summarise."""
    turn_start, called = _turn(request.messages)
    user_text = request.messages[turn_start].text if turn_start >= 0 else ""
    turn = request.messages[turn_start + 1:]
    planned = planned_calls(user_text)
    if planned is not None and called < len(planned):
        name, arguments = planned[called]
        call = ToolCall(id=f"call_{turn_start + 1}_{called}", name=name, arguments=arguments)
        return ModelResponse(text=f"Calling {name}.", tool_calls=(call,), stop_reason="tool_use")
    if planned is None and called < len(request.tools):
        spec = request.tools[called]
        call = ToolCall(id=f"call_{turn_start + 1}_{called}", name=spec.name,
                        arguments=example_arguments(spec, user_text))
        return ModelResponse(text=f"Calling {spec.name}.", tool_calls=(call,),
                             stop_reason="tool_use")
    results = [m for m in turn if m.role == "tool"]
    seen = _seen(request, request.messages[max(turn_start, 0):])
    if request.output_schema is not None:
        return ModelResponse(text=json.dumps(structured_answer(
            request.output_schema, [m.text for m in results if not m.is_error], user_text)))
    if not results:
        return ModelResponse(text=(f"You said: {user_text}" if user_text else "Hello.") + seen)
    names = {call.id: call.name for message in turn for call in message.tool_calls}
    lines = [f"Here is what I found for {user_text!r}:"]
    for message in results:
        marker = " (error)" if message.is_error else ""
        lines.append(f"- {names.get(message.tool_call_id or '', 'tool')}{marker}: "
                     f"{message.text}")
    return ModelResponse(text="\n".join(lines) + seen)


def _seen(request: ModelRequest, messages: Sequence[Message]) -> str:
    """Lines naming the files shown with ``messages`` and the bytes received of each."""
    lines = [f"- {a.name} ({a.content_type}"
             + (f", {a.width}x{a.height} px" if a.width and a.height else "")
             + f"): {len(request.attachment_data.get(a.file_id, b'')):,} bytes received"
             for message in messages for a in message.attachments]
    return "\n\nI was shown:\n" + "\n".join(lines) if lines else ""


def planned_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls an input of the form ``{"toolCalls": [{"name", "arguments"}, ...]}`` asks
    for, or ``None`` for any other input."""
    if not text.lstrip().startswith("{"):  # most inputs: no parse error raised per model call
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    calls = data.get("toolCalls") if isinstance(data, dict) else None
    if not isinstance(calls, list):
        return None
    return [(str(call.get("name", "")), dict(call.get("arguments") or {}))
            for call in calls if isinstance(call, dict)]


def structured_answer(schema: dict[str, Any], results: Sequence[str], text: str) -> Any:
    """An answer matching ``schema``: the latest tool result that is JSON of its shape, else a
    value made from the schema."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    for result in reversed(results):
        try:
            value = json.loads(result)
        except ValueError:
            continue
        if validator.is_valid(value):
            return value
    return _example_value(schema, text, filled=True)


def example_arguments(spec: ToolSpec, text: str) -> dict[str, Any]:
    """Arguments that satisfy the tool's schema, with the user's text in string fields."""
    properties = spec.parameters.get("properties", {})
    required = spec.parameters.get("required", [])
    return {name: _example_value(properties.get(name, {}), text) for name in required}


def _example_value(schema: dict[str, Any], text: str, *, filled: bool = False) -> Any:
    """A value of ``schema``; ``filled``: objects and arrays get example contents too (an
    answer), else they are empty (a tool's arguments)."""
    if "default" in schema:
        return schema["default"]
    if "const" in schema and filled:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return _example_value(schema["anyOf"][0], text, filled=filled)
    kind = schema.get("type", "string")
    if filled and kind == "object":
        properties = schema.get("properties", {})
        return {name: _example_value(properties.get(name, {}), text, filled=True)
                for name in schema.get("required", properties)}
    if filled and kind == "array" and isinstance(schema.get("items"), dict):
        return [_example_value(schema["items"], text, filled=True)] * max(
            1, schema.get("minItems", 0))
    return {"string": text, "integer": 1, "number": 1.0, "boolean": True, "array": [],
            "object": {}, "null": None}.get(kind, text)


class ScriptedProvider(ModelProvider):
    """Serves ``toren/scripted`` (and any ``toren/scripted-*`` alias) offline."""

    prefix = "toren"
    description = "offline deterministic model (toren/scripted): no key, no network"

    def get_model(self, model_id: str) -> Model:
        name = model_id.partition("/")[2]
        if name != "scripted" and not name.startswith("scripted-"):
            raise ConfigError(f"unknown built-in model {model_id!r}: the built-in offline model "
                              "is 'toren/scripted'")
        return ScriptedModel(
            model_id,
            delay=_env_float("TOREN_SCRIPTED_DELAY"),
            call_log=os.environ.get("TOREN_SCRIPTED_CALL_LOG") or None,
            cost_usd=_env_float("TOREN_SCRIPTED_COST_USD"),
        )


def _env_float(name: str) -> float:
    raw = os.environ.get(name) or "0"
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None


@hookimpl
def register_models(register: Callable[[ModelProvider], None]) -> None:
    register(ScriptedProvider())


@hookimpl
def register_embedders(register: Callable[[Embedder], None]) -> None:
    register(HashEmbedder())
