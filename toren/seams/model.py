"""What a model provider plugin implements (``Model``, ``ModelProvider``), with the shapes of a
model call it translates to and from its wire format.

The shapes (``Message``, ``ToolCall``, ``ModelRequest``, ...) live in ``toren.core.messages``,
the bottom layer, and are re-exported here for plugin authors.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from toren.core.attachments import (
    IMAGE_TYPES,
    PDF_TYPE,
    SHOWABLE_TYPES,
    Attachment,
    estimated_tokens,
    image_size,
    image_type,
    pdf_pages,
)
from toren.core.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    OnText,
    Role,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from toren.core.pricing import Pricing

__all__ = ["IMAGE_TYPES", "PDF_TYPE", "SHOWABLE_TYPES", "Attachment", "Message", "Model",
           "ModelProvider", "ModelRequest", "ModelResponse", "OnText", "Role", "StopReason",
           "ToolCall", "ToolSpec", "Usage", "image_size", "image_type", "pdf_pages"]


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
    #: Content types the model takes as attachments besides text (a subset of
    #: ``toren.core.attachments.SHOWABLE_TYPES``: PNG, JPEG, GIF, WebP, PDF). Empty (the
    #: default): it is shown none; a run's files reach it as a note naming them, and an agent
    #: with ``attachments: {unsupported: refuse}`` that shows a kind it cannot take is refused
    #: at load. The host reads it when a run or message brings files; the task loop before
    #: each call, so a fallback model that cannot see them reads the note instead.
    input_types: frozenset[str] = frozenset()
    #: The environment variable (or secret) the model's API key is read from, e.g.
    #: ``ANTHROPIC_API_KEY``: rate-limit buckets named ``key:<VAR>`` apply to its calls, and a
    #: 429 pauses that bucket for the whole fleet (docs/guides/flow-control.md). ``None``: the
    #: model takes no key (offline models).
    key_env: str | None = None

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

    def attachment_tokens(self, attachment: Attachment) -> int:
        """The input tokens showing ``attachment`` costs this model, by the provider's
        published formula. The task loop adds them up for the receipt's image tokens (providers
        report no separate count) and for budget and compaction estimates; the default is
        ``toren.core.attachments.estimated_tokens`` (Anthropic's formula).
        """
        return estimated_tokens(attachment)

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
