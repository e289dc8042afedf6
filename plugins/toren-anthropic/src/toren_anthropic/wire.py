"""Toren's neutral model shapes to and from the Messages API wire format (pure, no I/O).

The API's rules that Toren's conversation does not follow on its own are enforced here: user
and assistant turns alternate (consecutive turns of one role are merged, tool results become
``tool_result`` blocks of a user turn, ahead of its text), no content block is empty, and
``tool_use``/``tool_result`` blocks appear only when the request defines tools (a request
without tools, such as a compaction summary, gets past tool calls and results as text).

Prompt caching (``ModelRequest.prompt_caching``) marks ``cache_control`` breakpoints, at most
four (the API's limit): the last tool definition, the system prompt, the last block of the
previous user turn (where the previous step's request ended, so this step reads what that step
wrote, however many blocks the step added) and the last block of the last user turn (written
for the next step). A request is a pure function of the conversation, so the request rebuilt
after a restart is byte for byte the one the crashed worker would have sent, and reads the
same cache.

Images and PDFs (``Message.attachments``, their bytes in ``ModelRequest.attachment_data``) go
as base64 ``image`` and ``document`` blocks: in a user turn ahead of its text, and in a tool
result's ``content`` after its text (a request without tools gets them after the result's
text). The last-block cache breakpoint may then land on an image or document block, which
takes one as a text block does.

Structured output (``ModelRequest.output_schema``) is the API's ``output_config.format``
(``json_schema``): the answer is a text block of JSON matching the schema, tools still allowed
before it. The schema goes through the SDK's ``transform_schema`` (objects closed, keywords the
API does not take moved into descriptions); Toren validates the answer against the schema as
written either way.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toren.plugin import (
    PDF_TYPE,
    Attachment,
    Message,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from anthropic.types import Message as ApiMessage

    from toren_anthropic.prices import ModelPrice

#: Stand-ins for turns with no content at all, which the API rejects.
EMPTY_USER_TEXT = "(no input)"
EMPTY_ASSISTANT_TEXT = "(no answer)"

Params = dict[str, Any]
Block = dict[str, Any]
#: Assistant turns as the API returned them (thinking blocks included), by conversation key.
Replay = Mapping[str, Sequence[Block]]
#: Where this plugin keeps its data in ``Message.provider_data``.
PROVIDER_DATA_KEY = "anthropic"
#: A cache breakpoint with the API's default lifetime (5 minutes, refreshed by each read).
CACHE_BREAKPOINT = {"type": "ephemeral"}
#: The most ``cache_control`` breakpoints one request may carry.
MAX_BREAKPOINTS = 4


def tool_param(spec: ToolSpec) -> Block:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def request_params(request: ModelRequest, *, model: str, replay: Replay | None = None) -> Params:
    """The keyword arguments of ``messages.create`` for ``request``, sent to API model ``model``.

    Assistant turns recorded exactly as the API returned them (their ``provider_data``, or
    ``replay``) are sent back verbatim while the conversation before them is unchanged, so
    their thinking blocks come back with their tool calls, as the API asks.
    """
    tools = [tool_param(spec) for spec in request.tools]
    messages = wire_messages(request.messages, tools_offered=bool(tools),
                             attachment_data=request.attachment_data)
    replay = {**recorded_replay(request.messages), **(replay or {})}
    if replay:
        _replay_turns(request.system, tools, messages, replay)
    params: Params = {"model": model, "max_tokens": request.max_tokens, "messages": messages}
    if request.system:
        params["system"] = request.system
    if tools:
        params["tools"] = tools
    if request.output_schema is not None:
        params["output_config"] = {"format": output_format(request.output_schema)}
    if request.prompt_caching:
        mark_cache_breakpoints(params)
    return params


def output_format(schema: dict[str, Any]) -> Block:
    """``output_config.format`` for ``schema``, made acceptable to the API by the SDK's
    ``transform_schema``; a schema it cannot transform (a ``type`` list, say) is sent as
    written, for the API to take or refuse."""
    from anthropic import transform_schema  # the SDK is imported lazily (plugin load stays fast)

    try:
        sent = transform_schema(schema)
    except (ValueError, TypeError, AssertionError):
        sent = copy.deepcopy(schema)
    return {"type": "json_schema", "schema": sent}


def mark_cache_breakpoints(params: Params) -> None:
    """Put ``cache_control`` on the prefix's stable points (see the module's docstring).

    The API caches the prompt in the order tools, system, messages: a breakpoint caches
    everything before it. Only user turns are marked (an assistant turn may hold thinking
    blocks, which cannot carry one, and is sent back verbatim).
    """
    if params.get("tools"):
        params["tools"][-1]["cache_control"] = dict(CACHE_BREAKPOINT)
    if params.get("system"):
        params["system"] = [{"type": "text", "text": params["system"],
                             "cache_control": dict(CACHE_BREAKPOINT)}]
    user_turns = [turn for turn in params["messages"] if turn["role"] == "user"]
    for turn in user_turns[-2:]:
        turn["content"][-1]["cache_control"] = dict(CACHE_BREAKPOINT)


def cache_breakpoints(params: Params) -> list[str]:
    """Where a request's breakpoints are, e.g. ``["tools.1", "system.0",
    "messages.2.content.0"]`` (for tests, and for anyone checking a request by hand)."""
    found = [f"tools.{index}" for index, tool in enumerate(params.get("tools", ()))
             if "cache_control" in tool]
    system = params.get("system")
    if isinstance(system, list):
        found += [f"system.{index}" for index, block in enumerate(system)
                  if "cache_control" in block]
    for index, turn in enumerate(params["messages"]):
        content = turn["content"]
        if isinstance(content, list):
            found += [f"messages.{index}.content.{position}"
                      for position, block in enumerate(content) if "cache_control" in block]
    return found


def wire_messages(messages: Iterable[Message], *, tools_offered: bool = True,
                  attachment_data: Mapping[str, bytes] | None = None) -> list[Block]:
    """Toren messages as alternating user/assistant API messages (attachments' bytes from
    ``attachment_data``, by file id)."""
    names: dict[str, str] = {}
    merged: list[Block] = []
    data = attachment_data or {}
    for message in messages:
        for call in message.tool_calls:
            names[call.id] = call.name
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, tools_offered, names, data)
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": blocks})
    for turn in merged:
        if turn["role"] == "user":
            # the API wants a turn's tool results first, then any text
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
        if not turn["content"]:
            empty = EMPTY_USER_TEXT if turn["role"] == "user" else EMPTY_ASSISTANT_TEXT
            turn["content"].append({"type": "text", "text": empty})
    return merged


def _blocks(message: Message, tools_offered: bool, names: Mapping[str, str],
            data: Mapping[str, bytes]) -> list[Block]:
    shown = attachment_blocks(message.attachments, data)
    if message.role == "tool":
        if tools_offered:
            result: Block = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
            if shown:
                text = [_text(message.text)] if message.text.strip() else []
                result["content"] = text + shown
            elif message.text:
                result["content"] = message.text
            if message.is_error:
                result["is_error"] = True
            return [result]
        name = names.get(message.tool_call_id or "", "tool")
        label = "error from" if message.is_error else "result of"
        return [_text(f"[{label} {name} call {message.tool_call_id}]\n{message.text}"), *shown]
    blocks: list[Block] = []
    if message.role == "user":
        blocks += shown  # the API reads images best ahead of the question about them
    if message.text.strip():
        blocks.append(_text(message.text))
    for call in message.tool_calls:
        if tools_offered:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name,
                           "input": call.arguments})
        else:
            arguments = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
            blocks.append(_text(f"[called {call.name} (call {call.id}) with {arguments}]"))
    return blocks


def _text(text: str) -> Block:
    return {"type": "text", "text": text}


def attachment_blocks(attachments: Iterable[Attachment], data: Mapping[str, bytes]
                      ) -> list[Block]:
    """Base64 ``image`` blocks and, for PDFs, ``document`` blocks. An attachment whose bytes
    the request lacks (the task loop always reads them: a provider called directly may not)
    becomes a text block naming the file."""
    blocks: list[Block] = []
    for attachment in attachments:
        content = data.get(attachment.file_id)
        if content is None:
            blocks.append(_text(f"[not shown: {attachment.describe()}: its content was not "
                                "provided]"))
            continue
        blocks.append({
            "type": "document" if attachment.content_type == PDF_TYPE else "image",
            "source": {"type": "base64", "media_type": attachment.content_type,
                       "data": base64.b64encode(content).decode("ascii")}})
    return blocks


# -- thinking blocks -----------------------------------------------------------------------------


def conversation_key(system: str, tools: Sequence[Block], messages: Sequence[Block]) -> str:
    """A digest of everything a model saw before it answered (system, tools, messages)."""
    payload = json.dumps([system, list(tools), list(messages)], sort_keys=True,
                         ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def params_key(params: Params) -> str:
    """``conversation_key`` of a request built by ``request_params`` (its cache breakpoints
    aside: the key is what the model saw, with or without caching)."""
    system = params.get("system", "")
    if isinstance(system, list):
        system = "".join(block["text"] for block in system)
    return conversation_key(system, _unmarked(params.get("tools", [])),
                            _unmarked(params["messages"]))


def _unmarked(blocks: Sequence[Block]) -> list[Block]:
    """Tools or turns without their ``cache_control`` breakpoints."""
    unmarked: list[Block] = []
    for block in blocks:
        block = {key: value for key, value in block.items() if key != "cache_control"}
        if isinstance(block.get("content"), list):
            block["content"] = _unmarked(block["content"])
        unmarked.append(block)
    return unmarked


def replayable_turn(message: ApiMessage) -> list[Block] | None:
    """The answer's content as sent back later, if it must be sent back verbatim.

    Only answers that call tools and carry thinking blocks need it: their thinking has to
    accompany the tool results. Other answers are rebuilt from Toren's messages.
    """
    types = {block.type for block in message.content}
    if "tool_use" not in types or not types & {"thinking", "redacted_thinking"}:
        return None
    return [block.to_dict(mode="json") for block in message.content]


def _replay_turns(system: str, tools: Sequence[Block], messages: list[Block],
                  replay: Replay) -> None:
    for index, turn in enumerate(messages):
        if turn["role"] != "assistant":
            continue
        original = replay.get(conversation_key(system, tools, messages[:index]))
        if original is not None and _tool_ids(original) == _tool_ids(turn["content"]):
            turn["content"] = copy.deepcopy(list(original))


def _tool_ids(blocks: Iterable[Block]) -> list[str]:
    return [block["id"] for block in blocks if block.get("type") == "tool_use"]


# -- responses -----------------------------------------------------------------------------------


def model_response(message: ApiMessage, *, model_id: str, price: ModelPrice | None = None,
                   asked: Params | None = None) -> ModelResponse:
    """The API's answer as a ``ModelResponse`` for Toren model ``model_id``.

    ``cost_usd`` is left to the kernel (``Model.pricing``) except for models whose price
    depends on the prompt's length, which are priced here per call; ``None`` means unknown.
    An answer that must be sent back verbatim (see ``replayable_turn``) travels in
    ``provider_data`` with the key of the request that produced it (``asked``): Toren records
    it in the event log, so it survives restarts.
    """
    parts: list[str] = []
    calls: list[ToolCall] = []
    adjacent = False  # text blocks split by citations join directly; others by a blank line
    for block in message.content:
        if block.type == "text":
            if parts and not adjacent:
                parts.append("\n\n")
            parts.append(block.text)
            adjacent = True
            continue
        adjacent = False
        if block.type == "tool_use":
            calls.append(tool_call(block.id, block.name, block.input))
    usage = message.usage
    counts = Usage(input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
                   cache_read_tokens=usage.cache_read_input_tokens or 0,
                   cache_write_tokens=usage.cache_creation_input_tokens or 0)
    # a price that depends on the prompt's length: this call's tier, recorded with the call
    tier = price.tier(counts) if price is not None and not price.flat else None
    cost = tier.cost(counts) if tier is not None else None
    turn = replayable_turn(message)
    provider_data = None
    if turn is not None and asked is not None:
        provider_data = {PROVIDER_DATA_KEY: {"content": turn, "asked": params_key(asked)}}
    return ModelResponse(text="".join(parts), tool_calls=tuple(calls),
                         stop_reason=stop_reason(message.stop_reason, bool(calls)),
                         usage=counts, model=model_id, cost_usd=cost,
                         provider_data=provider_data, pricing=tier)


def recorded_replay(messages: Iterable[Message]) -> dict[str, Sequence[Block]]:
    """The verbatim answers carried by the conversation's own messages (``provider_data``)."""
    replay: dict[str, Sequence[Block]] = {}
    for message in messages:
        kept = (message.provider_data or {}).get(PROVIDER_DATA_KEY)
        if message.role == "assistant" and isinstance(kept, dict):
            replay[kept["asked"]] = kept["content"]
    return replay


def tool_call(call_id: str, name: str, arguments: object) -> ToolCall:
    if isinstance(arguments, dict):
        return ToolCall(call_id, name, arguments)
    return ToolCall(call_id, name, {}, arguments_error=(
        f"expected a JSON object, got {type(arguments).__name__}: {arguments!r}"[:300]))


def stop_reason(api_reason: str | None, has_tool_calls: bool) -> StopReason:
    """Toren's stop reason for the API's (``max_tokens`` and a full context window stop
    a generation short; ``refusal``, ``pause_turn`` and stop sequences end the turn)."""
    if api_reason in ("max_tokens", "model_context_window_exceeded"):
        return "max_tokens"
    return "tool_use" if has_tool_calls else "end_turn"
