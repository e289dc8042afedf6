"""The ``openai`` model provider: OpenAI, and any OpenAI-compatible server, via Chat Completions."""

from __future__ import annotations

import asyncio
import logging
import os
from urllib.parse import urlsplit

import openai

from toren.config import positive_number
from toren.errors import ConfigError, ProviderError
from toren.seams.model import Model, ModelProvider, ModelRequest, ModelResponse
from toren_openai import errors, prices, wire

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Seconds a model call may take before it fails (retryably); ``TOREN_OPENAI_TIMEOUT``.
DEFAULT_TIMEOUT_S = 600.0
#: Preflight runs before workers start, so it must not wait as long as a model call may.
PREFLIGHT_TIMEOUT_S = 30.0
#: Sent as the key to servers that need none (Ollama, vLLM, LM Studio): the SDK insists on one.
PLACEHOLDER_API_KEY = "no-key-needed"
KEY_VAR = "OPENAI_API_KEY"
BASE_URL_VAR = "OPENAI_BASE_URL"
TIMEOUT_VAR = "TOREN_OPENAI_TIMEOUT"


def is_openai_endpoint(base_url: str | None) -> bool:
    """Whether ``base_url`` is OpenAI's own API (or Azure OpenAI), not a compatible server."""
    if not base_url:
        return True
    host = (urlsplit(base_url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith((".openai.com", ".openai.azure.com"))


class OpenAIModel(Model):
    """One model at one endpoint. The SDK client is made lazily, inside the running event loop
    (one per model instance), with the SDK's own retries off: Toren's recorded backoff is the
    only retry, so every attempt shows up in the run's events.

    Args:
        model_id: ``openai/<model>``.
        base_url: the endpoint (``baseUrl:`` or ``OPENAI_BASE_URL``); ``None`` for OpenAI.
        timeout_s: seconds a call may take.
    """

    def __init__(self, model_id: str, *, base_url: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.model_id = model_id
        self.model_name = model_id.partition("/")[2]
        self.base_url = base_url
        self.endpoint = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        info = prices.lookup(self.model_name)
        self.pricing = info.pricing if info else None
        self.context_window = info.context_window if info else None
        #: OpenAI wants max_completion_tokens; compatible servers know max_tokens. A server that
        #: rejects the one sent gets the other from then on.
        self.token_field = (wire.MAX_COMPLETION_TOKENS if is_openai_endpoint(base_url)
                            else wire.MAX_TOKENS)
        self._client: openai.AsyncOpenAI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model_id!r}, endpoint={self.endpoint!r})"

    def client(self) -> openai.AsyncOpenAI:
        """The SDK client for the running event loop (made on first use)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            key = os.environ.get(KEY_VAR)
            if not key:
                if not self.base_url or is_openai_endpoint(self.base_url):
                    raise ProviderError(f"{self.model_id}: {KEY_VAR} is not set; set it to an "
                                        "API key (https://platform.openai.com/api-keys)")
                key = PLACEHOLDER_API_KEY
            self._client = openai.AsyncOpenAI(
                api_key=key, base_url=self.base_url, max_retries=0,
                timeout=openai.Timeout(self.timeout_s, connect=min(self.timeout_s, 30.0)))
            self._loop = loop
        return self._client

    async def complete(self, request: ModelRequest) -> ModelResponse:
        client = self.client()
        params = wire.chat_request(request, self.model_name, token_field=self.token_field)
        try:
            try:
                completion = await client.chat.completions.create(**params)
            except openai.APIStatusError as exc:
                if not errors.rejects_parameter(exc, self.token_field):
                    raise
                # A 400 costs nothing: switch the output-limit field and ask again, once.
                other = (wire.MAX_TOKENS if self.token_field == wire.MAX_COMPLETION_TOKENS
                         else wire.MAX_COMPLETION_TOKENS)
                log.info("%s rejects %s; using %s instead", self.endpoint, self.token_field,
                         other)
                params[other] = params.pop(self.token_field)
                self.token_field = other
                completion = await client.chat.completions.create(**params)
        except openai.OpenAIError as exc:
            raise errors.translate(exc, model_id=self.model_id, endpoint=self.endpoint) from exc
        return wire.model_response(completion.to_dict(warnings=False), self.model_id)

    async def preflight(self) -> None:
        """``GET /models`` with the configured key: refuses a rejected key or an unreachable
        endpoint; a server without ``/models`` or a passing hiccup does not stop startup."""
        client = self.client()
        where = f"GET {self.endpoint}/models"
        try:
            page = await client.models.list(timeout=min(self.timeout_s, PREFLIGHT_TIMEOUT_S))
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status in (401, 403):
                raise ProviderError(
                    f"{where} answered {status}: {errors.provider_message(exc)}; set "
                    f"{KEY_VAR} to a key this endpoint accepts", status=status) from exc
            if status in (404, 405, 501):
                log.info("%s answered %s: the server has no model list; skipping the preflight "
                         "of %s", where, status, self.model_id)
            else:
                log.warning("%s answered %s (%s); starting anyway: calls retry with backoff",
                            where, status, errors.provider_message(exc))
            return
        except openai.APITimeoutError:
            log.warning("%s did not answer within %ss; starting anyway", where,
                        min(self.timeout_s, PREFLIGHT_TIMEOUT_S))
            return
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc.__context__
            raise ProviderError(f"cannot connect to {self.endpoint}"
                                + (f": {cause}" if cause and str(cause) else "")
                                + "; check baseUrl / OPENAI_BASE_URL and that the server runs"
                                ) from exc
        except openai.OpenAIError as exc:
            raise ProviderError(f"{where} failed: {exc}") from exc
        listed = {getattr(item, "id", None) for item in page.data or ()}
        if listed and self.model_name not in listed:
            log.warning("%s does not list %s; calls to it may fail with 404 (listed: %s)",
                        where, self.model_name, ", ".join(sorted(map(str, listed))[:10]))

    async def aclose(self) -> None:
        """Close the HTTP connections; the next call opens new ones."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()


class OpenAIProvider(ModelProvider):
    """Serves ``openai/<model>``: OpenAI's API, or any server an agent's ``baseUrl:`` (or
    ``OPENAI_BASE_URL``) points at."""

    prefix = "openai"
    description = ("OpenAI and OpenAI-compatible servers (Ollama, vLLM, LM Studio) through "
                   "Chat Completions")
    required_env = (KEY_VAR,)
    supports_base_url = True

    def required_env_for(self, model_id: str, base_url: str | None = None) -> tuple[str, ...]:
        """``OPENAI_API_KEY``, unless a base URL points at a server of one's own (they
        rarely need a key; set one anyway if yours does)."""
        endpoint = base_url or os.environ.get(BASE_URL_VAR) or None
        return self.required_env if is_openai_endpoint(endpoint) else ()

    def get_model(self, model_id: str, *, base_url: str | None = None) -> Model:
        name = model_id.partition("/")[2]
        if not name.strip():
            raise ConfigError(f"model id {model_id!r} names no model: use openai/<model>, "
                              "e.g. openai/gpt-4o-mini, or openai/llama3.1 with a baseUrl")
        return OpenAIModel(model_id, base_url=base_url or os.environ.get(BASE_URL_VAR) or None,
                           timeout_s=timeout_from_env())


def timeout_from_env() -> float:
    """``TOREN_OPENAI_TIMEOUT`` in seconds (default ``DEFAULT_TIMEOUT_S``)."""
    return positive_number(os.environ, TIMEOUT_VAR, DEFAULT_TIMEOUT_S, float)
