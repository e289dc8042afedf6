"""``AnthropicModel``: one Claude model through the official async SDK.

This module imports the SDK (about a second): ``AnthropicProvider.get_model`` imports it when an
agent first uses an ``anthropic/`` model, never when the plugin is loaded.
"""

from __future__ import annotations

import asyncio
import logging

import anthropic

from toren.plugin import (
    IMAGE_TYPES,
    PDF_TYPE,
    Model,
    ModelRequest,
    ModelResponse,
    OnText,
    ProviderError,
)
from toren_anthropic import wire
from toren_anthropic.errors import api_detail, one_line, provider_error
from toren_anthropic.prices import price_for
from toren_anthropic.provider import (
    CONNECT_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    KEY_VAR,
    PREFLIGHT_TIMEOUT_S,
)

log = logging.getLogger(__name__)

#: Statuses of an endpoint (a gateway, a proxy) that has no ``/v1/models``.
NO_MODEL_LIST = frozenset({404, 405, 501})
#: Seconds past the SDK's own timeout before the preflight gives up on its own.
PREFLIGHT_GRACE_S = 2.0
#: What Claude 3 and every later model take besides text: PNG, JPEG, GIF and WebP images
#: (``image`` blocks) and PDFs (``document`` blocks).
VISION_TYPES = IMAGE_TYPES | {PDF_TYPE}
#: Models from before Claude 3, which take text only.
TEXT_ONLY_PREFIXES = ("claude-2", "claude-instant")


def input_types_for(api_model: str) -> frozenset[str]:
    """The attachment types an API model id takes: all of ``VISION_TYPES``, except for the
    text-only models before Claude 3 (a model the kernel cannot show a file reads a note
    naming it instead)."""
    if api_model.strip().lower().startswith(TEXT_ONLY_PREFIXES):
        return frozenset()
    return VISION_TYPES


class AnthropicModel(Model):
    """One Claude model, e.g. ``anthropic/claude-sonnet-4-6``.

    Args:
        model_id: the Toren model id, ``anthropic/<API model id>``.
        base_url: the API's base URL (an agent's ``baseUrl``); ``None`` lets the SDK decide
            (``ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com``).
        timeout_s: seconds one call may take before it fails (retryably).
    """

    def __init__(self, model_id: str, *, base_url: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.model_id = model_id
        self.key_env = KEY_VAR
        self.api_model = model_id.partition("/")[2]
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.timeout = anthropic.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self.price = price_for(self.api_model)
        # a price that depends on the prompt's length is applied per call (wire.model_response)
        self.pricing = self.price.pricing if self.price is not None and self.price.flat else None
        self.context_window = self.price.context_window if self.price is not None else None
        #: Images and PDFs are shown as content blocks (``wire.attachment_blocks``); their
        #: tokens are estimated by the kernel's default, Anthropic's published formula.
        self.input_types = input_types_for(self.api_model)
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        #: Whether to send ``output_config.format`` for an output schema (a model or gateway
        #: that refuses it is asked without it from then on: Toren still validates answers).
        self.native_output = True

    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client, made on first use inside the running event loop (its connection
        pool belongs to that loop; a new loop gets a new client)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = anthropic.AsyncAnthropic(
                base_url=self.base_url,
                # Toren's recorded, visible backoff is the only retry: an SDK retry would be
                # an unrecorded second attempt (and a second bill) inside one model call.
                max_retries=0,
                timeout=self.timeout)
            self._client_loop = loop
        return self._client

    @property
    def endpoint(self) -> str:
        client = self._client
        url = str(client.base_url) if client is not None else (self.base_url or "")
        return url.rstrip("/") or "the default URL"

    def _params(self, request: ModelRequest) -> wire.Params:
        params = wire.request_params(request, model=self.api_model)
        if not self.native_output:
            params.pop("output_config", None)
        return params

    def _refuses_output_format(self, exc: anthropic.AnthropicError,
                               params: wire.Params) -> bool:
        """Whether ``exc`` is a 400 refusing ``output_config`` (a model without structured
        outputs): if so it is dropped from ``params`` and from later calls."""
        if "output_config" not in params or not isinstance(exc, anthropic.BadRequestError):
            return False
        said = api_detail(exc).lower()
        if "output_config" not in said and "output_format" not in said and \
                "structured output" not in said:
            return False
        log.info("%s refuses output_config (%s); asking without it (Toren validates the "
                 "answers, and its repair turns quote the schema)", self.model_id,
                 one_line(api_detail(exc)))
        del params["output_config"]
        self.native_output = False
        return True

    async def complete(self, request: ModelRequest) -> ModelResponse:
        client = self.client()
        params = self._params(request)
        try:
            # an explicit timeout also stops the SDK from refusing large max_tokens unstreamed
            try:
                message = await client.messages.create(**params, timeout=self.timeout)
            except anthropic.BadRequestError as exc:
                if not self._refuses_output_format(exc, params):
                    raise
                message = await client.messages.create(**params, timeout=self.timeout)
        except anthropic.AnthropicError as exc:
            raise provider_error(exc, model_id=self.model_id, endpoint=self.endpoint,
                                 timeout_s=self.timeout_s) from exc
        return wire.model_response(message, model_id=self.model_id, price=self.price,
                                   asked=params)

    async def stream(self, request: ModelRequest, on_text: OnText) -> ModelResponse:
        """The same call through the SDK's streaming API (``messages.stream``): each text
        delta goes to ``on_text`` as it arrives; the final message is what is recorded."""
        client = self.client()
        params = self._params(request)
        try:
            try:
                message = await self._stream(client, params, on_text)
            except anthropic.BadRequestError as exc:
                if not self._refuses_output_format(exc, params):
                    raise
                message = await self._stream(client, params, on_text)
        except anthropic.AnthropicError as exc:
            raise provider_error(exc, model_id=self.model_id, endpoint=self.endpoint,
                                 timeout_s=self.timeout_s) from exc
        return wire.model_response(message, model_id=self.model_id, price=self.price,
                                   asked=params)

    async def _stream(self, client: anthropic.AsyncAnthropic, params: wire.Params,
                      on_text: OnText) -> anthropic.types.Message:
        async with client.messages.stream(**params, timeout=self.timeout) as stream:
            async for text in stream.text_stream:
                on_text(text)
            return await stream.get_final_message()

    async def preflight(self) -> None:
        """List one model (``GET /v1/models?limit=1``: authenticated, free), within
        ``PREFLIGHT_TIMEOUT_S`` and without retries.

        A rejected key (401/403) raises ``ProviderError``: the worker refuses to start. An
        unreachable API (no connection, no answer in time, a 5xx) is not a bad key: one warning
        says so and the worker starts (its model calls retry with backoff). An endpoint without
        a model list (404/405/501) skips the check; any other answer is logged and tolerated.
        """
        client = self.client()
        limit = min(PREFLIGHT_TIMEOUT_S, self.timeout_s)
        try:
            # the SDK's timeout bounds each phase; this bounds the whole check (DNS included)
            async with asyncio.timeout(limit + PREFLIGHT_GRACE_S):
                await client.models.list(limit=1, timeout=anthropic.Timeout(
                    limit, connect=min(CONNECT_TIMEOUT_S, limit)))
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as exc:
            raise ProviderError(
                f"the Anthropic API at {self.endpoint} rejected the key in {KEY_VAR}: "
                f"{exc.status_code} {exc.type or 'error'}: {api_detail(exc)}",
                status=exc.status_code) from exc
        except anthropic.APIStatusError as exc:
            said = f"{exc.status_code} {exc.type or 'error'}: {api_detail(exc)}"
            if exc.status_code in NO_MODEL_LIST:
                log.info("preflight of %s: %s has no model list (%s); skipping the check",
                         self.model_id, self.endpoint, said)
            elif exc.status_code >= 500:
                self._warn_unreachable(said)
            else:
                log.warning("preflight of %s: %s answered %s; could not check %s, starting "
                            "anyway", self.model_id, self.endpoint, said, KEY_VAR)
        except (anthropic.APITimeoutError, TimeoutError):
            self._warn_unreachable(f"no answer within {limit:g}s")
        except anthropic.APIConnectionError as exc:
            self._warn_unreachable(one_line(str(exc.__cause__ or exc.message)))
        except anthropic.AnthropicError as exc:
            log.warning("preflight of %s: could not check %s (%s: %s); starting anyway",
                        self.model_id, KEY_VAR, type(exc).__name__, one_line(str(exc)))

    def _warn_unreachable(self, why: str) -> None:
        log.warning("preflight of %s: the Anthropic API at %s is unreachable, not a bad key "
                    "(%s); starting anyway: model calls retry with backoff until it answers",
                    self.model_id, self.endpoint, why)

    async def aclose(self) -> None:
        """Close the SDK client's connections (safe to call twice)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()
