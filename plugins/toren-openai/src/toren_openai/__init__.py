"""Toren model provider for OpenAI and OpenAI-compatible servers (``openai/<model>``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toren_openai.provider import OpenAIProvider

if TYPE_CHECKING:
    from toren_openai.model import OpenAIModel

__version__ = "0.1.0"

__all__ = ["OpenAIModel", "OpenAIProvider", "__version__"]


def __getattr__(name: str) -> Any:
    # OpenAIModel imports the SDK: only when asked for, so loading the plugin stays cheap
    if name == "OpenAIModel":
        from toren_openai.model import OpenAIModel

        return OpenAIModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
