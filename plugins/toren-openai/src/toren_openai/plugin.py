"""The plugin entry point (group ``toren``, name ``openai``): registers the provider."""

from __future__ import annotations

from collections.abc import Callable

from toren import hookimpl
from toren.plugin import ModelProvider
from toren_openai.provider import OpenAIProvider

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"


@hookimpl
def register_models(register: Callable[[ModelProvider], None]) -> None:
    register(OpenAIProvider())
