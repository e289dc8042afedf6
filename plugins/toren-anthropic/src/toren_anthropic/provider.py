"""The ``anthropic`` model provider: Claude models through the official async SDK."""

from __future__ import annotations

import asyncio
import logging
import os

import anthropic

from toren.config import positive_number
from toren.errors import ConfigError, ProviderError
from toren.seams.model import Model, ModelProvider, ModelRequest, ModelResponse
from toren_anthropic import wire
from toren_anthropic.errors import KEY_VAR, TIMEOUT_VAR, api_detail, provider_error
from toren_anthropic.prices import price_for

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
#: Seconds to establish a connection (the whole call may take up to the timeout).
CONNECT_TIMEOUT_S = 10.0
PREFLIGHT_TIMEOUT_S = 30.0


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
        self.api_model = model_id.partition("/")[2]
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.timeout = anthropic.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self.price = price_for(self.api_model)
        # a price that depends on the prompt's length is applied per call (wire.model_response)
        self.pricing = self.price.pricing if self.price is not None and self.price.flat else None
        self.context_window = self.price.context_window if self.price is not None else None
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

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

    async def complete(self, request: ModelRequest) -> ModelResponse:
        client = self.client()
        params = wire.request_params(request, model=self.api_model)
        try:
            # an explicit timeout also stops the SDK from refusing large max_tokens unstreamed
            message = await client.messages.create(**params, timeout=self.timeout)
        except anthropic.AnthropicError as exc:
            raise provider_error(exc, model_id=self.model_id, endpoint=self.endpoint,
                                 timeout_s=self.timeout_s) from exc
        return wire.model_response(message, model_id=self.model_id, price=self.price,
                                   asked=params)

    async def preflight(self) -> None:
        """List one model: cheap, authenticated, free. Only a rejected key (401/403) stops the
        worker; an outage or an endpoint without ``/v1/models`` is logged and tolerated."""
        client = self.client()
        try:
            await client.models.list(limit=1, timeout=anthropic.Timeout(
                min(PREFLIGHT_TIMEOUT_S, self.timeout_s),
                connect=min(CONNECT_TIMEOUT_S, self.timeout_s)))
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as exc:
            raise ProviderError(
                f"the Anthropic API at {self.endpoint} rejected the key in {KEY_VAR}: "
                f"{exc.status_code} {exc.type or 'error'}: {api_detail(exc)}",
                status=exc.status_code) from exc
        except anthropic.AnthropicError as exc:
            problem = provider_error(exc, model_id=self.model_id, endpoint=self.endpoint,
                                     timeout_s=self.timeout_s)
            log.warning("preflight of %s could not check %s: %s; starting anyway",
                        self.model_id, KEY_VAR, problem.message)

    async def aclose(self) -> None:
        """Close the SDK client's connections (safe to call twice)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()


class AnthropicProvider(ModelProvider):
    """Serves ``anthropic/<model>`` for any model id the Messages API accepts."""

    prefix = "anthropic"
    description = "Claude models through the Anthropic Messages API (anthropic/<model>)"
    required_env = (KEY_VAR,)
    supports_base_url = True

    def get_model(self, model_id: str, *, base_url: str | None = None) -> Model:
        name = model_id.partition("/")[2]
        if not name.strip():
            raise ConfigError(f"model {model_id!r} names no Claude model: use "
                              "anthropic/<model>, e.g. anthropic/claude-sonnet-4-6")
        return AnthropicModel(model_id, base_url=base_url or None, timeout_s=timeout_from_env())


def timeout_from_env() -> float:
    """``TOREN_ANTHROPIC_TIMEOUT`` in seconds (default ``DEFAULT_TIMEOUT_S``)."""
    return positive_number(os.environ, TIMEOUT_VAR, DEFAULT_TIMEOUT_S, float)
