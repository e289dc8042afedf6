"""The ``anthropic`` model provider: Claude models through the official async SDK.

Loading the plugin imports only this module: the SDK is imported by ``toren_anthropic.model``
when ``get_model`` makes the first model, so ``toren --help`` does not pay for it.
"""

from __future__ import annotations

import os

from toren.plugin import ConfigError, Model, ModelProvider, positive_number

KEY_VAR = "ANTHROPIC_API_KEY"
TIMEOUT_VAR = "TOREN_ANTHROPIC_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
#: Seconds to establish a connection (the whole call may take up to the timeout).
CONNECT_TIMEOUT_S = 10.0
#: The preflight runs before workers start: an API that does not answer within this long is
#: reported unreachable and the worker starts anyway.
PREFLIGHT_TIMEOUT_S = 10.0


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
        from toren_anthropic.model import AnthropicModel  # imports the SDK, on first use

        return AnthropicModel(model_id, base_url=base_url or None, timeout_s=timeout_from_env())


def timeout_from_env() -> float:
    """``TOREN_ANTHROPIC_TIMEOUT`` in seconds (default ``DEFAULT_TIMEOUT_S``)."""
    return positive_number(os.environ, TIMEOUT_VAR, DEFAULT_TIMEOUT_S, float)
