"""The plugin entry point (group ``toren``, name ``openai``): registers the provider."""

from __future__ import annotations

from collections.abc import Callable

from toren import hookimpl
from toren.seams.model import ModelProvider
from toren_openai.provider import OpenAIProvider


@hookimpl
def register_models(register: Callable[[ModelProvider], None]) -> None:
    register(OpenAIProvider())
