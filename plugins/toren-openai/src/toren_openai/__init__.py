"""Toren model provider for OpenAI and OpenAI-compatible servers (``openai/<model>``)."""

from toren_openai.provider import OpenAIModel, OpenAIProvider

__version__ = "0.1.0"

__all__ = ["OpenAIModel", "OpenAIProvider", "__version__"]
