"""toren-slack: the ``slack`` channel (Events API webhooks or Socket Mode, Web API sends)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren_slack.channel import SlackChannel

__all__ = ["SlackChannel"]


def __getattr__(name: str) -> Any:
    # imported when first used: the entry point (plugin.py) is imported by every CLI command,
    # the channel (aiohttp, the chat host) only by a process that serves it
    if name == "SlackChannel":
        from toren_slack.channel import SlackChannel

        return SlackChannel
    raise AttributeError(f"module 'toren_slack' has no attribute {name!r}")
