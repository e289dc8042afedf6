"""The ``openai`` model provider: OpenAI, and any OpenAI-compatible server, via Chat Completions.

Loading the plugin imports only this module: the SDK is imported by ``toren_openai.model`` when
``get_model`` makes the first model, so ``toren --help`` does not pay for it.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from toren.plugin import ConfigError, Model, ModelProvider, positive_number

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Seconds a model call may take before it fails (retryably); ``TOREN_OPENAI_TIMEOUT``.
DEFAULT_TIMEOUT_S = 600.0
#: Seconds to establish a connection (the whole call may take up to the timeout).
CONNECT_TIMEOUT_S = 30.0
#: The preflight runs before workers start: an endpoint that does not answer within this long
#: is reported unreachable and the worker starts anyway.
PREFLIGHT_TIMEOUT_S = 10.0
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
        from toren_openai.model import OpenAIModel  # imports the SDK, on first use

        return OpenAIModel(model_id, base_url=base_url or os.environ.get(BASE_URL_VAR) or None,
                           timeout_s=timeout_from_env())


def timeout_from_env() -> float:
    """``TOREN_OPENAI_TIMEOUT`` in seconds (default ``DEFAULT_TIMEOUT_S``)."""
    return positive_number(os.environ, TIMEOUT_VAR, DEFAULT_TIMEOUT_S, float)
