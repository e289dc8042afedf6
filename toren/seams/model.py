"""Provider-neutral shapes for model calls: what the task loop sends and what providers return.

Model provider plugins translate these to and from their wire format; the event log stores them
as plain JSON (see ``to_json``/``from_json``), so a run recorded with one provider plugin version
can be replayed by another.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
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
    ``is_error`` marks a result that reports a failure back to the model.
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False
    #: What the provider needs back verbatim with this turn (e.g. Anthropic thinking blocks);
    #: recorded in ``ModelCallCompleted``, so it survives restarts. Opaque to the kernel.
    provider_data: dict[str, Any] | None = None

    # Explicit (not dataclasses.asdict) because checkpoints convert thousands of messages.
    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "text": self.text,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments,
                                "arguments_error": c.arguments_error}
                               for c in self.tool_calls],
                "tool_call_id": self.tool_call_id, "is_error": self.is_error,
                "provider_data": self.provider_data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        calls = data.get("tool_calls")
        return cls(data["role"], data.get("text", ""),
                   tuple(ToolCall(c["id"], c["name"], c["arguments"], c.get("arguments_error"))
                         for c in calls)
                   if calls else (),
                   data.get("tool_call_id"), data.get("is_error", False),
                   data.get("provider_data"))


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the provider for one call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class ModelRequest:
    """Everything a provider needs for one call."""

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelResponse:
        calls = tuple(ToolCall(**call) for call in data.get("tool_calls", ()))
        usage = Usage(**data.get("usage", {}))
        return cls(**{**data, "tool_calls": calls, "usage": usage})


class Model(abc.ABC):
    """A callable model, made by a ``ModelProvider`` for one model id.

    The task loop calls ``complete`` once per step; the worker calls ``preflight`` once at start.
    """

    #: The full model id, e.g. ``anthropic/claude-sonnet-4-5`` or ``toren/scripted``.
    model_id: str
    #: The price from the provider's table, or ``None`` if unknown (the cost is then recorded as
    #: unknown, never guessed). An agent's ``pricing:`` overrides it.
    pricing: Pricing | None = None
    #: The context window in tokens, if known; compaction starts by default at 80% of it.
    context_window: int | None = None

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one model call; raise ``toren.errors.ProviderError`` (retryable or not)."""

    async def stream(self, request: ModelRequest, on_text: OnText) -> ModelResponse:
        """Run one model call, telling ``on_text`` each piece of text as it is generated.

        The task loop calls this (not ``complete``) for every call of an agent's turn; what
        ``on_text`` hears goes to live watchers only (never to the event log: the durable
        record is the ``ModelResponse`` returned). The pieces joined are the response's text.
        The default makes one ``complete`` call and tells the whole text at once; providers
        whose API streams override it.
        """
        response = await self.complete(request)
        if response.text:
            on_text(response.text)
        return response

    def worst_case_cost_usd(self, request: ModelRequest) -> float | None:
        """The most ``request`` can cost, for a model without ``pricing`` per token (a flat
        price per call, a provider that reports costs itself); ``None``: unknown.

        The task loop calls it before each model call of an agent with a budget when no
        price per token is known; with neither, a budgeted task stops (``unknown_cost``).
        """
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release connections (HTTP clients); ``Runtime.stop`` calls it once per model.

        The model must still work afterwards (it reopens lazily): runtimes may be restarted.
        """

    async def preflight(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """One cheap authenticated call; raise ``ProviderError`` if credentials are broken.

        ``toren.Runtime.start`` calls it once per model in use before workers start, unless
        ``TOREN_SKIP_PREFLIGHT=1``. The default does nothing (offline models need no key).
        """


class ModelProvider(abc.ABC):
    """A family of models routed by id prefix (``anthropic/...``), registered by a plugin."""

    #: The id prefix before the first ``/``, e.g. ``anthropic``.
    prefix: str
    #: One line shown by ``toren plugins``.
    description: str = ""
    #: Environment variables the provider needs (checked at startup for agents that use it).
    required_env: tuple[str, ...] = ()

    def required_env_for(self, model_id: str, base_url: str | None = None) -> tuple[str, ...]:
        """The variables needed for this model and endpoint (default: ``required_env``).

        Called at startup for every model an agent uses; override when, say, a local
        OpenAI-compatible server at ``base_url`` needs no key.
        """
        return self.required_env

    @abc.abstractmethod
    def get_model(self, model_id: str) -> Model:
        """A ``Model`` for ``model_id`` (prefix included); ``ConfigError`` if unknown.

        Providers that talk to a configurable endpoint also accept ``base_url=`` (keyword),
        passed when an agent sets ``baseUrl:``; the kernel only passes it to providers whose
        ``supports_base_url`` is true.
        """

    #: Whether ``get_model`` accepts ``base_url=`` (an agent's ``baseUrl:``).
    supports_base_url: bool = False
