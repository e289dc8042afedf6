"""``OpenAIModel``: one model at one endpoint, through the official async SDK (Chat Completions).

This module imports the SDK (about a second): ``OpenAIProvider.get_model`` imports it when an
agent first uses an ``openai/`` model, never when the plugin is loaded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import openai

from toren.plugin import Attachment, Model, ModelRequest, ModelResponse, OnText, ProviderError
from toren_openai import errors, prices, vision, wire
from toren_openai.provider import (
    BASE_URL_VAR,
    CONNECT_TIMEOUT_S,
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT_S,
    KEY_VAR,
    PLACEHOLDER_API_KEY,
    PREFLIGHT_TIMEOUT_S,
    is_openai_endpoint,
)

log = logging.getLogger(__name__)

#: Statuses of a server (Ollama, a proxy) that has no ``/models``.
NO_MODEL_LIST = frozenset({404, 405, 501})
#: Seconds past the SDK's own timeout before the preflight gives up on its own.
PREFLIGHT_GRACE_S = 2.0


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
        self.key_env = KEY_VAR
        self.model_name = model_id.partition("/")[2]
        self.base_url = base_url
        self.endpoint = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        info = prices.lookup(self.model_name)
        self.pricing = info.pricing if info else None
        self.context_window = info.context_window if info else None
        #: Images and PDFs for the vision models, by name (``toren_openai.vision``); any
        #: other model reads a note naming the files instead.
        self.input_types = vision.input_types_for(self.model_name)
        #: OpenAI wants max_completion_tokens; compatible servers know max_tokens. A server that
        #: rejects the one sent gets the other from then on.
        self.token_field = (wire.MAX_COMPLETION_TOKENS if is_openai_endpoint(base_url)
                            else wire.MAX_TOKENS)
        #: Whether to ask for usage in a stream's last chunk (a server that rejects
        #: ``stream_options`` is asked without it from then on).
        self.stream_usage = True
        #: Whether to send ``response_format`` for an output schema (a server that rejects it
        #: is asked without it from then on: Toren still validates the answer).
        self.native_output = True
        #: Whether the server was seen answering a stream request with plain JSON (said once).
        self.streams_json = False
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
                timeout=openai.Timeout(self.timeout_s,
                                       connect=min(self.timeout_s, CONNECT_TIMEOUT_S)))
            self._loop = loop
        return self._client

    async def complete(self, request: ModelRequest) -> ModelResponse:
        client = self.client()
        params = self._params(request)
        try:
            completion = await self._create_adapting(client, params)
        except openai.OpenAIError as exc:
            raise errors.translate(exc, model_id=self.model_id, endpoint=self.endpoint) from exc
        return wire.model_response(completion.to_dict(warnings=False), self.model_id)

    async def stream(self, request: ModelRequest, on_text: OnText) -> ModelResponse:
        """The same call streamed (``stream=True``, usage in the last chunk): each text delta
        goes to ``on_text`` as it arrives; the chunks put together are what is recorded."""
        client = self.client()
        params = self._params(request) | {"stream": True}
        if self.stream_usage:
            params["stream_options"] = {"include_usage": True}
        streamed = wire.StreamedCompletion()
        try:
            chunks = await self._create_adapting(client, params)
            answered = await self._plain_answer(chunks)
            if answered is not None:  # the server ignored stream=True
                if answered.text:
                    on_text(answered.text)
                return answered
            async for chunk in chunks:
                text = streamed.add(chunk.to_dict(warnings=False))
                if text:
                    on_text(text)
        except openai.OpenAIError as exc:
            raise errors.translate(exc, model_id=self.model_id, endpoint=self.endpoint) from exc
        return wire.model_response(streamed.completion(), self.model_id)

    async def _plain_answer(self, chunks: Any) -> ModelResponse | None:
        """The completion of a server that answered a stream request with plain JSON (some
        OpenAI-compatible servers and proxies ignore ``stream``), read from the response before
        the SDK looks for ``data:`` lines in it (it would find none: "answered without a
        completion: {}"); ``None`` for an event stream. Said once per model in the log."""
        response = getattr(chunks, "response", None)
        kind = str(getattr(response, "headers", {}).get("content-type", "")).lower()
        if response is None or not kind or kind.startswith("text/event-stream"):
            return None
        try:
            body = await response.aread()
        except Exception as exc:  # the connection broke while the answer was read
            raise ProviderError(f"{self.model_id}: reading the answer of {self.endpoint} "
                                f"failed: {type(exc).__name__}: {exc}", retryable=True,
                                reason="connection") from exc
        finally:
            await response.aclose()
        try:
            data = json.loads(body)
        except ValueError:
            raise ProviderError(
                f"{self.model_id}: {self.endpoint} answered a stream request with {kind}, "
                f"neither an event stream nor JSON: {body[:200]!r}") from None
        if not self.streams_json:
            log.warning("%s answered a stream request with plain JSON (%s): using that answer "
                        "whole; text reaches live watchers when the call ends, not as it is "
                        "generated", self.endpoint, kind)
        self.streams_json = True
        return wire.model_response(data if isinstance(data, dict) else {}, self.model_id)

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params = wire.chat_request(request, self.model_name, token_field=self.token_field)
        if not self.native_output:
            params.pop("response_format", None)
        return params

    async def _create_adapting(self, client: openai.AsyncOpenAI, params: dict[str, Any]
                               ) -> Any:
        """``chat.completions.create``; a 400 rejecting the output-limit field,
        ``stream_options`` or ``response_format`` (costing nothing) switches the field or drops
        the option, and asks again, remembering it for later calls."""
        switched = False
        while True:
            try:
                return await client.chat.completions.create(**params)
            except openai.APIStatusError as exc:
                if "response_format" in params and errors.rejects_parameter(exc,
                                                                            "response_format"):
                    log.info("%s rejects response_format; asking without it (Toren validates "
                             "the answers, and its repair turns quote the schema)",
                             self.endpoint)
                    del params["response_format"]
                    self.native_output = False
                    continue
                if "stream_options" in params and errors.rejects_parameter(exc,
                                                                           "stream_options"):
                    log.info("%s rejects stream_options; streaming without usage",
                             self.endpoint)
                    del params["stream_options"]
                    self.stream_usage = False
                    continue
                if switched or not errors.rejects_parameter(exc, self.token_field):
                    raise
                other = (wire.MAX_TOKENS if self.token_field == wire.MAX_COMPLETION_TOKENS
                         else wire.MAX_COMPLETION_TOKENS)
                log.info("%s rejects %s; using %s instead", self.endpoint, self.token_field,
                         other)
                params[other] = params.pop(self.token_field)
                self.token_field = other
                switched = True

    def attachment_tokens(self, attachment: Attachment) -> int:
        """An image's tokens by OpenAI's published formula for this model (tiles or patches,
        ``toren_openai.vision``); a PDF's by the kernel's default estimate."""
        if attachment.kind != "image":
            return super().attachment_tokens(attachment)
        return vision.image_tokens(self.model_name, attachment.width, attachment.height)

    async def preflight(self) -> None:
        """``GET /models`` with the configured key, within ``PREFLIGHT_TIMEOUT_S`` and without
        retries.

        A rejected key (401/403) raises ``ProviderError``: the worker refuses to start. An
        unreachable endpoint (no connection, no answer in time, a 5xx) is not a bad key: one
        warning says so and the worker starts (its model calls retry with backoff). A server
        without a model list (404/405/501) skips the check; any other answer is logged and
        tolerated. A model the list does not name gets a warning.
        """
        client = self.client()
        where = f"GET {self.endpoint}/models"
        limit = min(self.timeout_s, PREFLIGHT_TIMEOUT_S)
        try:
            # the SDK's timeout bounds each phase; this bounds the whole check (DNS included)
            async with asyncio.timeout(limit + PREFLIGHT_GRACE_S):
                page = await client.models.list(timeout=openai.Timeout(
                    limit, connect=min(limit, CONNECT_TIMEOUT_S)))
        except openai.APIStatusError as exc:
            status = exc.status_code
            said = f"{status} ({errors.provider_message(exc)})"
            if status in (401, 403):
                raise ProviderError(
                    f"{where} answered {status}: {errors.provider_message(exc)}; set "
                    f"{KEY_VAR} to a key this endpoint accepts", status=status) from exc
            if status in NO_MODEL_LIST:
                log.info("preflight of %s: %s answered %s: the server has no model list; "
                         "skipping the check", self.model_id, where, said)
            elif status >= 500:
                self._warn_unreachable(f"{where} answered {said}")
            else:
                log.warning("preflight of %s: %s answered %s; could not check %s, starting "
                            "anyway", self.model_id, where, said, KEY_VAR)
            return
        except (openai.APITimeoutError, TimeoutError):
            self._warn_unreachable(f"no answer within {limit:g}s")
            return
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc.__context__
            self._warn_unreachable(str(cause) if cause and str(cause) else exc.message)
            return
        except openai.OpenAIError as exc:
            log.warning("preflight of %s: could not check %s (%s: %s); starting anyway",
                        self.model_id, KEY_VAR, type(exc).__name__, exc)
            return
        listed = {getattr(item, "id", None) for item in page.data or ()}
        if listed and self.model_name not in listed:
            log.warning("%s does not list %s; calls to it may fail with 404 (listed: %s)",
                        where, self.model_name, ", ".join(sorted(map(str, listed))[:10]))

    def _warn_unreachable(self, why: str) -> None:
        log.warning("preflight of %s: %s is unreachable, not a bad key (%s); starting anyway: "
                    "model calls retry with backoff until it answers (check baseUrl / %s if "
                    "this lasts)", self.model_id, self.endpoint, why, BASE_URL_VAR)

    async def aclose(self) -> None:
        """Close the HTTP connections; the next call opens new ones."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()
