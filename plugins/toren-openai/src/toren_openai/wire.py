"""Toren's model shapes to and from the Chat Completions wire format (pure: no I/O).

Chat Completions is the API every OpenAI-compatible server speaks (Ollama, vLLM, LM Studio,
llama.cpp, proxies), so it is the only one this plugin uses. Responses come in as the JSON of a
completion (a dict), so the mapping is tested with literal payloads and tolerates servers that
omit optional fields.

Images and PDFs (``Message.attachments``, their bytes in ``ModelRequest.attachment_data``) are
content parts of a user message, after its text: ``image_url`` parts with a base64 ``data:``
URL, and ``file`` parts (``filename``, ``file_data``) for PDFs. A tool message carries text
only, and every tool message must follow its assistant message directly, so the files tools
returned go in ONE user message after the tool messages of that assistant turn: a text part
"Files returned by <tool> (call <id>):" per call, each followed by its files' parts.

Structured output (``ModelRequest.output_schema``) is ``response_format`` ``json_schema``,
``strict`` when the schema is one OpenAI's strict mode accepts (``strict_problem``): strict mode
refuses a schema whose objects allow other properties or leave one optional, so any other
schema is sent with ``strict: false`` (followed, not enforced; Toren validates the answer
either way).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toren.plugin import (
    PDF_TYPE,
    Attachment,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    StopReason,
    ToolCall,
    Usage,
)

#: The output-limit field of a request. OpenAI's own API wants ``max_completion_tokens`` (its
#: reasoning models reject ``max_tokens``); most compatible servers only know ``max_tokens``.
MAX_COMPLETION_TOKENS = "max_completion_tokens"
MAX_TOKENS = "max_tokens"

STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "end_turn",
}


def chat_request(request: ModelRequest, model_name: str, *,
                 token_field: str = MAX_COMPLETION_TOKENS) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for ``request``.

    Args:
        request: what the task loop asks for.
        model_name: the model as the server knows it (the Toren id without ``openai/``).
        token_field: ``max_completion_tokens`` or ``max_tokens`` (see ``MAX_TOKENS``).
    """
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(chat_messages(request.messages, request.attachment_data))
    params: dict[str, Any] = {"model": model_name, "messages": messages,
                              token_field: request.max_tokens}
    if request.tools:
        params["tools"] = [
            {"type": "function",
             "function": {"name": spec.name, "description": spec.description,
                          "parameters": spec.parameters}}
            for spec in request.tools]
    if request.output_schema is not None:
        params["response_format"] = response_format(request.output_schema)
    return params


#: The name the schema of a structured answer is sent under (``response_format``).
OUTPUT_SCHEMA_NAME = "output"
#: Keywords OpenAI's strict mode does not support.
STRICT_UNSUPPORTED = frozenset({
    "allOf", "oneOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
    "patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
    "contains", "minContains", "maxContains", "prefixItems", "uniqueItems"})


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """``response_format`` asking for an answer of ``schema`` (strict when it can be)."""
    return {"type": "json_schema",
            "json_schema": {"name": OUTPUT_SCHEMA_NAME, "schema": schema,
                            "strict": strict_problem(schema) is None}}


def strict_problem(schema: Any, where: str = "$") -> str | None:
    """Why strict mode would refuse ``schema``, or ``None`` if it accepts it: each object
    must set ``additionalProperties: false`` and list every property in ``required``, and no
    unsupported keyword (``STRICT_UNSUPPORTED``) may appear."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            problem = strict_problem(item, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if not isinstance(schema, dict):
        return None
    unsupported = sorted(STRICT_UNSUPPORTED & schema.keys())
    if unsupported:
        return f"{where}: {unsupported[0]} is not supported in strict mode"
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"{where}: additionalProperties must be false"
        if set(schema.get("required", ())) != set(schema.get("properties", {})):
            return f"{where}: every property must be required"
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            for name, sub in value.items():
                problem = strict_problem(sub, f"{where}.{key}.{name}")
                if problem is not None:
                    return problem
        elif key in ("items", "anyOf", "additionalProperties") and not isinstance(value, bool):
            problem = strict_problem(value, f"{where}.{key}")
            if problem is not None:
                return problem
    return None


def chat_messages(messages: Iterable[Message],
                  attachment_data: Mapping[str, bytes] | None = None) -> list[dict[str, Any]]:
    """Toren messages as Chat Completions messages, the files tools returned in a user
    message after each run of tool messages (see the module's docstring)."""
    data = attachment_data or {}
    names: dict[str, str] = {}
    sent: list[dict[str, Any]] = []
    returned: list[Message] = []  # tool messages with files in the current run
    for message in messages:
        if message.role != "tool" and returned:
            sent.append(tool_files_message(returned, names, data))
            returned = []
        for call in message.tool_calls:
            names[call.id] = call.name
        sent.append(chat_message(message, data))
        if message.role == "tool" and message.attachments:
            returned.append(message)
    if returned:
        sent.append(tool_files_message(returned, names, data))
    return sent


def tool_files_message(results: Sequence[Message], names: Mapping[str, str],
                       data: Mapping[str, bytes]) -> dict[str, Any]:
    """The user message that shows the files of ``results`` (tool messages)."""
    parts: list[dict[str, Any]] = []
    for result in results:
        name = names.get(result.tool_call_id or "", "the tool")
        parts.append(_text_part(f"Files returned by {name} (call {result.tool_call_id}):"))
        parts += attachment_parts(result.attachments, data)
    return {"role": "user", "content": parts}


def attachment_parts(attachments: Iterable[Attachment], data: Mapping[str, bytes]
                     ) -> list[dict[str, Any]]:
    """``image_url`` parts (a base64 ``data:`` URL) and, for PDFs, ``file`` parts. An
    attachment whose bytes the request lacks (the task loop always reads them: a provider
    called directly may not) becomes a text part naming the file."""
    parts: list[dict[str, Any]] = []
    for attachment in attachments:
        content = data.get(attachment.file_id)
        if content is None:
            parts.append(_text_part(f"[not shown: {attachment.describe()}: its content was "
                                    "not provided]"))
            continue
        url = (f"data:{attachment.content_type};base64,"
               f"{base64.b64encode(content).decode('ascii')}")
        if attachment.content_type == PDF_TYPE:
            parts.append({"type": "file", "file": {"filename": attachment.name,
                                                   "file_data": url}})
        else:
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def chat_message(message: Message, attachment_data: Mapping[str, bytes] | None = None
                 ) -> dict[str, Any]:
    """One Toren message as a Chat Completions message (a tool message's files are left to
    ``chat_messages``: a tool message carries text only)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "",
                "content": tool_result_text(message)}
    if message.role == "assistant":
        data: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            data["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name,
                              "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
                for call in message.tool_calls]
        elif not message.text:
            data["content"] = ""  # an empty turn still needs content for most servers
        return data
    if message.attachments:
        text = [_text_part(message.text)] if message.text.strip() else []
        return {"role": "user", "content": text + attachment_parts(message.attachments,
                                                                   attachment_data or {})}
    return {"role": "user", "content": message.text}


def tool_result_text(message: Message) -> str:
    """A tool result's content; Chat Completions has no error flag, so errors say so in text."""
    text = message.text
    if message.is_error and not text.lstrip().lower().startswith("error"):
        return f"Error: {text}" if text else "Error: the tool failed without a message."
    return text


def model_response(data: Mapping[str, Any], model_id: str) -> ModelResponse:
    """A completion's JSON as a ``ModelResponse`` for ``model_id`` (cost left to the kernel).

    Raises:
        ProviderError: the payload has no choice to read (a proxy answered 200 with an error).
    """
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        detail = json.dumps(data.get("error") or data, default=str)[:300]
        raise ProviderError(f"{model_id}: the server answered without a completion: {detail}")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = tuple(tool_call(raw, index)
                  for index, raw in enumerate(message.get("tool_calls") or ())
                  if isinstance(raw, Mapping) and raw.get("type", "function") == "function")
    text = message.get("content")
    if not isinstance(text, str):
        # a refusal replaces the content; a list of parts is joined (a few servers send one)
        text = message.get("refusal") or _join_parts(text)
    finish = choice.get("finish_reason") or "stop"
    # Some servers (older Ollama among them) report "stop" next to tool calls.
    stop_reason: StopReason = "tool_use" if calls else STOP_REASONS.get(finish, "end_turn")
    return ModelResponse(text=text, tool_calls=calls, stop_reason=stop_reason,
                         usage=usage(data.get("usage")), model=model_id, cost_usd=None)


def tool_call(raw: Mapping[str, Any], index: int) -> ToolCall:
    """One ``tool_calls`` entry; arguments that are not a JSON object become an
    ``arguments_error`` (the kernel turns it into an ``invalid_arguments`` tool error)."""
    function = raw.get("function") or {}
    name = str(function.get("name") or "")
    call_id = str(raw.get("id") or f"call_{uuid.uuid4().hex[:24]}")
    arguments, error = parse_arguments(function.get("arguments"))
    return ToolCall(call_id, name, arguments, arguments_error=error)


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """``(arguments, None)`` or ``({}, why they could not be read)``."""
    if isinstance(raw, Mapping):  # some servers send an object instead of a JSON string
        return dict(raw), None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # a call without arguments, as several servers send it
    if not isinstance(raw, str):
        return {}, f"expected a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"invalid JSON ({exc.msg} at character {exc.pos}): {_clip(raw)}"
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {_json_type(value)}: {_clip(raw)}"
    return value, None


def usage(data: Mapping[str, Any] | None) -> Usage:
    """Token counts; any missing field is 0 (many compatible servers omit the details).

    ``prompt_tokens`` includes cached tokens, while Toren counts input without them.
    """
    if not isinstance(data, Mapping):
        return Usage()
    details = data.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    prompt = _count(data.get("prompt_tokens"))
    cached = _count(details.get("cached_tokens"))
    written = _count(details.get("cache_write_tokens"))
    return Usage(input_tokens=max(0, prompt - cached - written),
                 output_tokens=_count(data.get("completion_tokens")),
                 cache_read_tokens=cached, cache_write_tokens=written)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _join_parts(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class StreamedCompletion:
    """A streamed completion put back together: ``add`` each chunk's JSON (it returns the
    chunk's text, if any); ``completion()`` is the completion's JSON as ``model_response``
    reads it. Tool call arguments arrive in fragments keyed by the call's index."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.chunks = 0

    def add(self, chunk: Mapping[str, Any]) -> str:
        self.chunks += 1
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = chunk["usage"]  # the last chunk, with stream_options.include_usage
        said = ""
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                said += delta["content"]
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            for fragment in delta.get("tool_calls") or ():
                self._add_call(fragment)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if said:
            self.text.append(said)
        return said

    def _add_call(self, fragment: Mapping[str, Any]) -> None:
        entry = self.calls.setdefault(int(fragment.get("index") or 0), {
            "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if fragment.get("id"):
            entry["id"] = fragment["id"]
        function = fragment.get("function") or {}
        if function.get("name") and not entry["function"]["name"]:
            entry["function"]["name"] = function["name"]
        if function.get("arguments"):
            entry["function"]["arguments"] += function["arguments"]

    def completion(self) -> dict[str, Any]:
        if not self.chunks:
            return {}
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.text) if self.text else None,
                                   "refusal": "".join(self.refusal) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[index] for index in sorted(self.calls)]
        return {"choices": [{"index": 0, "message": message,
                             "finish_reason": self.finish_reason}],
                "usage": self.usage}
