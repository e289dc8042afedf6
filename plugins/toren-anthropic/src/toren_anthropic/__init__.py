"""Anthropic Claude models for Toren: the ``anthropic/<model>`` provider."""

__version__ = "0.1.0"
