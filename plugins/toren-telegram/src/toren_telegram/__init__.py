"""toren-telegram: the ``telegram`` channel (Bot API long polling, optional webhook)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren_telegram.channel import TelegramChannel

__all__ = ["TelegramChannel"]


def __getattr__(name: str) -> Any:
    # imported when first used: the entry point (plugin.py) is imported by every CLI command,
    # the channel (aiohttp, the chat host) only by a process that serves it
    if name == "TelegramChannel":
        from toren_telegram.channel import TelegramChannel

        return TelegramChannel
    raise AttributeError(f"module 'toren_telegram' has no attribute {name!r}")
