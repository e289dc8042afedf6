"""The plugin module (entry point ``anthropic`` in group ``toren``): registers the provider."""

from __future__ import annotations

from collections.abc import Callable

from toren import hookimpl
from toren.seams.model import ModelProvider
from toren_anthropic.provider import AnthropicProvider


@hookimpl
def register_models(register: Callable[[ModelProvider], None]) -> None:
    register(AnthropicProvider())
