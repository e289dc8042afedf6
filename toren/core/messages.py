"""The value shapes of model calls: messages, tool calls, usage, requests and responses.

What the task loop sends and what providers return, provider-neutral. They sit in the pure core
(the fold, compaction and pricing read them) and are re-exported by ``toren.seams.model``, where
plugin authors find them beside ``Model`` and ``ModelProvider``. The event log stores them as
plain JSON (``to_json``/``from_json``), so a run recorded with one provider plugin version can
be replayed by another.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import msgspec

from toren.core.attachments import Attachment
from toren.core.pricing import Pricing

Role = Literal["user", "assistant", "tool"]
#: Told each piece of the model's text as it is generated (``Model.stream``); never blocks.
OnText = Callable[[str], None]
StopReason = Literal["end_turn", "tool_use", "max_tokens"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: a name, a description and a JSON Schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation requested by the model.

    A provider that receives arguments it cannot parse (invalid JSON from the model) sets
    ``arguments={}`` and says why in ``arguments_error``: the call goes back to the model as an
    ``invalid_arguments`` tool error instead of running.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_error: str | None = None


@dataclass(frozen=True)
class Message:
    """One conversation turn.

    ``role="tool"`` messages carry the result of the tool call named by ``tool_call_id``;
    ``is_error`` marks a result that reports a failure back to the model. ``attachments``
    are files shown with the turn (images, PDFs: a user's, or a tool's result); their bytes
    are in ``ModelRequest.attachment_data``.
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False
    #: What the provider needs back verbatim with this turn (e.g. Anthropic thinking blocks);
    #: recorded in ``ModelCallCompleted``, so it survives restarts. Opaque to the kernel.
    provider_data: dict[str, Any] | None = None
    attachments: tuple[Attachment, ...] = ()

    # Explicit (not dataclasses.asdict) because checkpoints convert thousands of messages.
    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "text": self.text,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments,
                                "arguments_error": c.arguments_error}
                               for c in self.tool_calls],
                "tool_call_id": self.tool_call_id, "is_error": self.is_error,
                "provider_data": self.provider_data} | (
                    {"attachments": msgspec.to_builtins(self.attachments)}
                    if self.attachments else {})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        calls = data.get("tool_calls")
        return cls(data["role"], data.get("text", ""),
                   tuple(ToolCall(c["id"], c["name"], c["arguments"], c.get("arguments_error"))
                         for c in calls)
                   if calls else (),
                   data.get("tool_call_id"), data.get("is_error", False),
                   data.get("provider_data"),
                   msgspec.convert(data.get("attachments") or (), tuple[Attachment, ...]))


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the provider for one call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Of ``input_tokens``, those the request's images and PDF pages took (an estimate by the
    #: provider's published formula: providers report no separate count). 0 without any.
    image_tokens: int = 0


@dataclass(frozen=True)
class ModelRequest:
    """Everything a provider needs for one call."""

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    #: Ask the provider to cache the prompt's prefix (tools, system prompt, the conversation so
    #: far) for the next call to read: the task loop sets it from the agent's
    #: ``promptCaching:``. Providers that cache on their own (OpenAI) or not at all ignore it.
    prompt_caching: bool = False
    #: The JSON Schema (2020-12, its root an object) the final answer must match: the task
    #: loop sets it from the agent's or subagent's ``output:``. A provider asks the model for
    #: it with its native mechanism (OpenAI ``response_format`` ``json_schema``, Anthropic
    #: ``output_config.format``) and returns the answer as JSON text; Toren validates it
    #: either way. Tool calls may still come before the answer.
    output_schema: dict[str, Any] | None = None
    #: The content of every attachment in ``messages``, by ``Attachment.file_id``: read by
    #: the task loop just before the call (the log holds only references). Only kinds the
    #: model takes (``Model.input_types``) are ever attached; others reach it as text.
    attachment_data: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        """Every attachment of the request's messages, in order."""
        # map and chain, not a generator: read before every model call, over the whole
        # conversation, so no Python-level step per message
        return tuple(itertools.chain.from_iterable(map(attachments_of, self.messages)))


#: A message's attachments (for ``map`` over a conversation).
attachments_of: Callable[[Message], tuple[Attachment, ...]] = operator.attrgetter("attachments")


@dataclass(frozen=True)
class ModelResponse:
    """A provider's answer: text and/or tool calls, with usage and cost.

    ``cost_usd`` is ``None`` when the price of the model is unknown; Toren never guesses a price.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason = "end_turn"
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    cost_usd: float | None = 0.0
    #: Opaque data to send back with this turn in later requests (see ``Message``).
    provider_data: dict[str, Any] | None = None
    #: The prices the provider applied when it set ``cost_usd`` itself (a price that depends
    #: on the prompt's length, say), so receipts can split the cost and what caching saved.
    pricing: Pricing | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelResponse:
        calls = tuple(ToolCall(**call) for call in data.get("tool_calls", ()))
        usage = Usage(**data.get("usage", {}))
        pricing = Pricing(**data["pricing"]) if data.get("pricing") else None
        return cls(**{**data, "tool_calls": calls, "usage": usage, "pricing": pricing})
